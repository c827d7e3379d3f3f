"""Writes pycasing.txt beside this script: Python's str case mapping of every single code point, and
the two properties its context rules read, for TestPythonCasing.

    python3 weights/chattemplate/testdata/pycasing.py

Lines "mapping CP UPPER LOWER TITLE CASEFOLD SWAPCASE" list each code point CP (hex) where one of
str.upper, lower, title, casefold and swapcase of the one-character string is not the character
itself; each result is its code points in hex joined by "+", or "." for the character itself. Lines
"cased LO HI" and "ignorable LO HI" are the ranges of the characters that are cased, and those that
are case-ignorable, as the final-sigma rule of str.lower sees them. Python exposes neither property,
so they are read off lower() itself: 'Σ' lowers to final 'ς' after a cased character, where the
case-ignorable characters between them are skipped.
"""
import os
import sys
import unicodedata


def chars():
    for c in range(sys.maxunicode + 1):
        if not 0xD800 <= c <= 0xDFFF:
            yield c, chr(c)


def hexes(s, ch):
    if s == ch:
        return "."
    return "+".join("%x" % ord(x) for x in s)


def final(s, i):
    """Whether the 'Σ' at s[i] lowers to the final 'ς' (the characters before it map to one each)."""
    return s.lower()[i] == "ς"


def cased(ch):
    return ch.islower() or ch.isupper() or unicodedata.category(ch) == "Lt"


def ignorable(ch):
    if cased(ch):
        # After 'ΑΣ' a case-ignorable character is skipped to the end (final); a cased one is not.
        return final("ΑΣ" + ch, 1)
    # Between 'Α' and 'Σ' a case-ignorable character is skipped (final); another one is not.
    return final("Α" + ch + "Σ", -1)


def ranges(pred):
    out = []
    for c, ch in chars():
        if not pred(ch):
            continue
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def main():
    lines = ["# Python %s, Unicode %s" % (sys.version.split()[0], unicodedata.unidata_version)]
    for c, ch in chars():
        maps = [ch.upper(), ch.lower(), ch.title(), ch.casefold(), ch.swapcase()]
        if any(m != ch for m in maps):
            lines.append("mapping %x %s" % (c, " ".join(hexes(m, ch) for m in maps)))
    for name, pred in (("cased", cased), ("ignorable", ignorable)):
        for lo, hi in ranges(pred):
            lines.append("%s %x %x" % (name, lo, hi))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pycasing.txt")
    with open(path, "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
