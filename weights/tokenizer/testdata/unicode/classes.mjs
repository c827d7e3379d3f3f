// Writes classes.json: the code points that HuggingFace tokenizers' added-token rules take for word
// characters and white space, as the Rust regex crate defines its Unicode classes (UTS #18):
// \w is \p{Alphabetic}, \p{M}, \p{Nd}, \p{Pc} and \p{Join_Control}; \s is \p{White_Space}.
// AddedVocabulary tests single_word with ^\w and \w$, lstrip and rstrip with \s. Node's regular
// expressions (ICU) answer the same property questions; each class is written as ranges
// [first, last], and the Unicode version they come from is recorded.
//
//   node classes.mjs        # rewrite classes.json
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

const classes = {
  word: /[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]/u,
  space: /\p{White_Space}/u,
};

function ranges(re) {
  const out = [];
  for (let c = 0; c <= 0x10ffff; c++) {
    if (c >= 0xd800 && c <= 0xdfff) continue; // surrogates: no characters
    if (!re.test(String.fromCodePoint(c))) continue;
    const last = out[out.length - 1];
    if (last && last[1] === c - 1) last[1] = c;
    else out.push([c, c]);
  }
  return out;
}

const lines = [`{"unicode": "${process.versions.unicode}",`];
const names = Object.keys(classes);
names.forEach((name, i) => {
  const rs = ranges(classes[name]).map(([a, b]) => `[${a},${b}]`);
  lines.push(` "${name}": [${rs.join(',')}]${i < names.length - 1 ? ',' : ''}`);
});
lines.push('}');
writeFileSync(join(here, 'classes.json'), lines.join('\n') + '\n');
