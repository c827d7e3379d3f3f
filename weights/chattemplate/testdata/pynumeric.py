"""Prints pystr.go's pyDigitExtra and pyNumericExtra: the code points outside Nd that Python's
str.isdigit accepts, and those outside the N categories that str.isnumeric accepts, as ranges.

    python3 weights/chattemplate/testdata/pynumeric.py
"""
import sys
import unicodedata


def ranges(pred):
    out = []
    for c in range(sys.maxunicode + 1):
        if 0xD800 <= c <= 0xDFFF or not pred(chr(c)):
            continue
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


print("# Unicode", unicodedata.unidata_version)
for name, pred in (
    ("pyDigitExtra", lambda ch: ch.isdigit() and unicodedata.category(ch) != "Nd"),
    ("pyNumericExtra", lambda ch: ch.isnumeric() and not unicodedata.category(ch).startswith("N")),
):
    print(name)
    for lo, hi in ranges(pred):
        print("\t{0x%04x, 0x%04x, 1}," % (lo, hi))
