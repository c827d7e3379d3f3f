// Writes ../golden/strings.json: the test strings every tokenizer is checked on (and, with --bench,
// a ~1 MB mixed text for the throughput comparison). Deterministic: a fixed seed, no randomness
// from the environment, so rerunning it reproduces the committed file byte for byte.
//
//   node gen_strings.mjs                    # rewrite ../golden/strings.json
//   node gen_strings.mjs --bench FILE       # write the benchmark text to FILE
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

// mulberry32: a tiny deterministic PRNG.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const words = {
  english: 'the quick brown fox jumps over lazy dog tokenizer model inference engine cache batch attention weights running between apple banana cherry however although Internationalization misunderstanding unbelievable antidisestablishmentarianism'.split(' '),
  russian: 'привет мир как дела сегодня хорошая погода Москва языковая модель токенизатор быстро'.split(' '),
  chinese: '你好 世界 今天 天气 很好 我们 正在 测试 分词器 语言模型 人工智能 北京 上海'.split(' '),
  japanese: 'こんにちは 世界 東京 カタカナ ひらがな 日本語 トークナイザー 速い テスト'.split(' '),
  korean: '안녕하세요 세계 한국어 토크나이저 테스트 오늘 날씨가 좋네요'.split(' '),
  arabic: 'مرحبا بالعالم كيف حالك اللغة العربية نموذج اختبار'.split(' '),
  hindi: 'नमस्ते दुनिया भारत हिन्दी भाषा परीक्षण मॉडल क्षत्रिय'.split(' '),
  thai: 'สวัสดี ชาวโลก ภาษาไทย ทดสอบ กรุงเทพมหานคร'.split(' '),
  greek: 'Γειά σου κόσμε ελληνικά δοκιμή Αθήνα'.split(' '),
  hebrew: 'שלום עולם עברית בדיקה ירושלים'.split(' '),
  vietnamese: 'Xin chào thế giới tiếng Việt kiểm tra Hà Nội'.split(' '),
  german: 'Größenordnung Straße Übermäßig schön Donaudampfschifffahrtsgesellschaft'.split(' '),
};

const emoji = [
  '😀', '👍', '👍🏽', '👍🏿', '❤️', '🔥', '🎉', '🤖', '🇺🇸', '🇯🇵', '🇪🇺', '1️⃣', '#️⃣',
  '👨‍👩‍👧‍👦', '👩🏽‍💻', '🏳️‍🌈', '🧑‍🤝‍🧑', '👁️‍🗨️', '🤦🏼‍♂️', '🫠', '🦀', '☕', '✅', '⚠️',
];

const code = [
  'func main() {\n\tfmt.Println("hello, world")\n}\n',
  'package tokenizer\n\nimport (\n\t"strings"\n\t"unicode/utf8"\n)\n',
  'def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n',
  'for (let i = 0; i < arr.length; i++) { console.log(`${i}: ${arr[i]}`); }',
  'fn main() -> Result<(), Box<dyn Error>> {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    Ok(())\n}',
  '#include <stdio.h>\nint main(void) { printf("%d\\n", 42); return 0; }\r\n',
  'SELECT id, name FROM users WHERE age >= 18 AND name LIKE \'%son\' ORDER BY id DESC;',
  '<div class="container"><p>Hello &amp; welcome</p><br/></div>',
  '{"key": "value", "list": [1, 2.5, -3e10, null, true], "nested": {"a": "b"}}',
  'x += y ** 2 // 3 % 4; a && b || !c; p->q; i++; --j; a != b; a <= b >= c; a => b; a ::= b',
  '    indented_with_spaces()\n\t\tindented_with_tabs()\n  \t mixed()\n',
  'if err != nil {\n\t\treturn fmt.Errorf("tokenizer %s: %w", path, err)\n\t}',
  'const re = /^(?:[a-z0-9!#$%&\'*+/=?^_`{|}~-]+)$/i; // email-ish',
  'std::vector<std::pair<int, std::string>> v{{1, "one"}, {2, "two"}};',
  '$ ls -la | grep "\\.go$" | wc -l && echo done || exit 1',
  'LaTeX: $\\frac{1}{2} + \\sum_{i=0}^{n} x_i^2 = \\int_0^\\infty e^{-x} dx$',
];

const specials = [
  '<s>', '</s>', '<unk>', '<|begin_of_text|>', '<|end_of_text|>', '<|eot_id|>', '<|start_header_id|>',
  '<|end_header_id|>', '<|reserved_special_token_5|>', '<|endoftext|>', '<|im_start|>', '<|im_end|>',
  '<think>', '</think>', '<tool_call>', '<|fim_prefix|>', '<|vision_pad|>',
];

const fixed = [
  '', ' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', '\r\n\r\n', ' \n ', '\t\t\n', 'a', 'A', '.', '0',
  'Hello world', 'Hello world!', ' Hello world', 'Hello world ', '  Hello   world  ', 'hello\nworld',
  'hello\r\nworld', 'hello\n\nworld', 'hello \n world', 'hello\t\tworld', 'end with newline\n',
  "I'm you're he'll she'd it's we've they're can't won't", "I'M YOU'RE HE'LL SHE'D IT'S WE'VE",
  "'s 't 're 've 'm 'll 'd", "x'S x'T x'Re x'rE", "'ſ and 'K", "don''t ''quoted'' 'single'",
  '12345', '1234567890123456789012345678901234567890', '3.14159265358979', '1,234,567.89', '-42', '+1e-10',
  '2024-01-15T10:30:00Z', '0x1F 0b1010 0o777', '١٢٣ ٤٥٦ ۷۸۹', '१२३४५', '①②③ ⅠⅡⅢ ½ ¾ ²³',
  'ＡＢＣ　全角スペース　ｆｕｌｌｗｉｄｔｈ', 'e\u0301 vs \u00e9', 'n\u0303o\u0308', 'Å vs A\u030a vs \u212b',
  '\u1100\u1161\u11a8 vs 각', 'ﬁ ﬂ ﬀ', 'x\u00a0y\u2009z\u3000w', 'zero\u200bwidth\u200cjoin\u200dhere',
  'tab\tseparated\tvalues', 'trailing spaces   ', '   leading spaces', 'a  b   c    d     e',
  '...', '!!!???', '---', '***bold***', '__init__', 'snake_case_name', 'camelCaseName', 'HTTPServerError',
  'https://example.com/path?query=1&other=two#frag', 'user@example.com', 'C:\\Users\\name\\file.txt',
  '<s>', '</s>', '<s>hello', 'hello<s>', ' <s> ', '<<s>>', '<s><s></s>', 'a<s>b</s>c', '<unk>',
  '<|begin_of_text|>Hello', 'Hi<|eot_id|>', '<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>',
  '<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
  '<think>\nreasoning\n</think>\n\nanswer', '<tool_call>{"name": "f"}</tool_call>', '<|endoftext|><|endoftext|>',
  '<|im_start', 'im_start|>', '< s>', '<s >', '<|reserved_special_token_250|>', '<|reserved_special_token_999|>',
  '\u0000\u0001\u0002\u001f\u007f', '\u0085\u2028\u2029', '\ufeffBOM', '\ufffd replacement', '\u{10ffff}\u{e000}',
  '\u{10041}\u0301 \u{e0070}\u0301 \u{11099}\u{110ba}',
  '𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕳𝖊𝖑𝖑𝖔', '𓀀𓀁𓀂 𐍈 𒀭', '😀😀😀😀😀😀😀😀', '👨‍👩‍👧‍👦👨‍👩‍👧‍👦', ' 👍🏽 ', 'ok👍', '🇺🇸🇯🇵🇪🇺',
  '▁ underscores ▁▁ ▁x', 'Ġ ġ Ċ', 'ĠĠĠ', '<0x41> <0xFF>', 'spaces before newline   \nand after\n   x',
  "'Sam 'TREE 'LLama 'Dog 'VEry 'Re 'ſt", 'İstanbul ΣΑΣ ΌΣΟΣ Straße ǅ ǈ', 'Hello World hello world HELLO WORLD',
  'ﬁne ﬁ ﬁﬁ', ' <|reserved_special_token_0|> x', 'a <|reserved_special_token_1|>  b', 'x<|reserved_special_token_2|>y',
  'x <|reserved_special_token_2|> y', '<|reserved_special_token_3|>', '  <|reserved_special_token_3|>  z', 'a<s>b <s> c',
  '(a) [b] {c} @user - x-y -- z; a.b,c', '``quoted`` text', 'x\tx\txxx', 'xx hello xx', 'ab123456789cd 12345',
  '\n\n\n\n\n\n\n\n', '                                                  ', '\t\t\t\t\t\t', '\r\r\r', '\r \n \r\n',
];

function pick(r, list) { return list[Math.floor(r() * list.length)]; }

function randomNumber(r) {
  const len = 1 + Math.floor(r() * (r() < 0.2 ? 40 : 8));
  let s = '';
  for (let i = 0; i < len; i++) s += String(Math.floor(r() * 10));
  if (r() < 0.3) s += '.' + String(Math.floor(r() * 1000));
  return s;
}

function randomWhitespace(r) {
  const parts = [' ', '  ', '\t', '\n', '\r\n', '\n\n', '   ', ' \t', '\t ', '\u3000', '\u00a0'];
  let s = '';
  const n = 1 + Math.floor(r() * 4);
  for (let i = 0; i < n; i++) s += pick(r, parts);
  return s;
}

// Code points assigned since long ago (Unicode 13 or earlier), so Go's tables and the oracle's agree.
const ranges = [
  [0x20, 0x7e], [0xa0, 0x24f], [0x250, 0x2af], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff],
  [0x531, 0x556], [0x5d0, 0x5ea], [0x620, 0x64a], [0x900, 0x97f], [0x980, 0x9fb], [0xe01, 0xe3a],
  [0x10a0, 0x10ff], [0x1100, 0x11ff], [0x1e00, 0x1eff], [0x2000, 0x206f], [0x20a0, 0x20bf], [0x2100, 0x218b],
  [0x2190, 0x23ff], [0x2500, 0x27bf], [0x3040, 0x30ff], [0x3400, 0x4dbf], [0x4e00, 0x9fef], [0xac00, 0xd7a3],
  [0xf900, 0xfa6d], [0xfe30, 0xfe4f], [0xff01, 0xffee], [0x1d400, 0x1d7ff], [0x1f300, 0x1f64f], [0x1f680, 0x1f6d7],
  [0x1f900, 0x1f9ff], [0x20000, 0x2a6dd],
];
const assigned = /[\p{L}\p{M}\p{N}\p{P}\p{S}\p{Zs}\t\n\r]/u;

function randomUnicode(r, n) {
  let s = '';
  while ([...s].length < n) {
    const [lo, hi] = pick(r, ranges);
    const c = String.fromCodePoint(lo + Math.floor(r() * (hi - lo + 1)));
    if (assigned.test(c)) s += c;
  }
  return s;
}

function randomSentence(r, lang) {
  const w = words[lang];
  const n = 1 + Math.floor(r() * 10);
  const sep = lang === 'chinese' || lang === 'japanese' ? '' : ' ';
  const out = [];
  for (let i = 0; i < n; i++) out.push(pick(r, w));
  let s = out.join(sep);
  if (r() < 0.5) s = s[0].toUpperCase() + s.slice(1);
  return s + pick(r, ['.', '!', '?', ',', '', '。', '…', ':']);
}

function randomMix(r) {
  const parts = [];
  const n = 2 + Math.floor(r() * 8);
  for (let i = 0; i < n; i++) {
    const k = r();
    if (k < 0.35) parts.push(randomSentence(r, pick(r, Object.keys(words))));
    else if (k < 0.45) parts.push(randomNumber(r));
    else if (k < 0.55) parts.push(pick(r, emoji));
    else if (k < 0.65) parts.push(randomWhitespace(r));
    else if (k < 0.72) parts.push(pick(r, specials));
    else if (k < 0.8) parts.push(randomUnicode(r, 1 + Math.floor(r() * 6)));
    else if (k < 0.88) parts.push(pick(r, code).slice(0, 20 + Math.floor(r() * 60)));
    else parts.push(pick(r, ["'s", "'T", "'re", "n't", "'LL", '"', "'", '(', ')', '...', '—', '–', '-']));
  }
  let s = '';
  for (const p of parts) s += (r() < 0.6 ? ' ' : '') + p;
  return s;
}

function testStrings() {
  const r = rng(20240601);
  const out = [...fixed, ...code];
  for (const lang of Object.keys(words)) {
    for (let i = 0; i < 4; i++) out.push(randomSentence(r, lang));
  }
  for (const e of emoji) out.push(e, `I ${e} it`, `${e}${e}`);
  for (let i = 0; i < 20; i++) out.push(randomNumber(r), `${randomNumber(r)} + ${randomNumber(r)} = ${randomNumber(r)}`);
  for (let i = 0; i < 20; i++) out.push(`word${randomWhitespace(r)}word${randomWhitespace(r)}`);
  for (let i = 0; i < 15; i++) out.push(`${pick(r, specials)}${randomSentence(r, 'english')}${pick(r, specials)}${randomWhitespace(r)}${pick(r, specials)}`);
  for (let i = 0; i < 30; i++) out.push(randomUnicode(r, 1 + Math.floor(r() * 24)));
  for (let i = 0; i < 80; i++) out.push(randomMix(r));
  return out;
}

function benchText(bytes) {
  const r = rng(7);
  const parts = [];
  let n = 0;
  while (n < bytes) {
    const k = r();
    let p;
    if (k < 0.55) p = randomSentence(r, 'english') + ' ' + randomSentence(r, 'english') + '\n';
    else if (k < 0.75) p = randomSentence(r, pick(r, Object.keys(words))) + ' ';
    else if (k < 0.85) p = pick(r, code) + '\n';
    else p = randomMix(r) + '\n';
    parts.push(p);
    n += Buffer.byteLength(p);
  }
  return parts.join('');
}

const args = process.argv.slice(2);
if (args[0] === '--bench') {
  writeFileSync(args[1], benchText(1 << 20));
} else {
  const strings = testStrings();
  writeFileSync(join(here, '..', 'golden', 'strings.json'), JSON.stringify(strings, null, 0).replace(/","/g, '",\n"') + '\n');
  console.log(`${strings.length} strings`);
}
