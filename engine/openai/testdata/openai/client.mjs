// client.mjs drives a running `gollm serve` with the official openai npm client, unmodified: every
// response goes through the SDK's own parsing (structured outputs and tool calls through its zod
// helpers). .ci/after.d/30-openai-client.sh starts the server, on the built-in model with the chat
// template of tools_template.jinja (the built-in model's own has no tools; this one renders them in
// Hermes' <tool_call> form), and runs it with GOLLM_URL (http://127.0.0.1:PORT), GOLLM_API_KEY and
// GOLLM_MAX_BODY (the server's --max-body-bytes). It prints "N passed, N failed" and exits non-zero on
// any failure.
import OpenAI from "openai";
import { zodFunction, zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";

const base = process.env.GOLLM_URL;
const apiKey = process.env.GOLLM_API_KEY;
const maxBody = Number(process.env.GOLLM_MAX_BODY || 65536);
if (!base || !apiKey) {
	console.error("set GOLLM_URL and GOLLM_API_KEY");
	process.exit(2);
}

const client = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 120_000 });
let passed = 0;
let failed = 0;

async function check(name, fn) {
	try {
		await fn();
		passed++;
		console.log(`ok   ${name}`);
	} catch (e) {
		failed++;
		console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
	}
}

function assert(cond, msg) {
	if (!cond) throw new Error(msg);
}

// expectStatus runs fn and checks that the SDK throws an APIError with the given status.
async function expectStatus(status, fn) {
	try {
		await fn();
	} catch (e) {
		assert(e instanceof OpenAI.APIError, `expected an APIError, got ${e}`);
		assert(e.status === status, `expected status ${status}, got ${e.status}: ${e.message}`);
		assert(typeof e.error?.message === "string" || status === 413, `error body lacks error.message: ${JSON.stringify(e.error)}`);
		return e;
	}
	throw new Error(`expected status ${status}, got success`);
}

// Wait for the server to come up.
for (let i = 0; ; i++) {
	try {
		const r = await fetch(`${base}/health`);
		if (r.ok) break;
	} catch {}
	if (i > 600) {
		console.error("server did not become healthy");
		process.exit(1);
	}
	await new Promise((r) => setTimeout(r, 100));
}

let model;
await check("models.list", async () => {
	const list = await client.models.list();
	assert(list.data.length === 1, `want one model, got ${JSON.stringify(list.data)}`);
	model = list.data[0].id;
	assert(list.data[0].object === "model", "object is not model");
});

await check("completion", async () => {
	const r = await client.completions.create({ model, prompt: "func main() {", max_tokens: 8, temperature: 0 });
	assert(r.object === "text_completion" && r.choices.length === 1, JSON.stringify(r));
	assert(typeof r.choices[0].text === "string" && r.choices[0].text.length > 0, "empty text");
	assert(["stop", "length"].includes(r.choices[0].finish_reason), `finish_reason ${r.choices[0].finish_reason}`);
	assert(r.usage.prompt_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, JSON.stringify(r.usage));
});

await check("completion stream", async () => {
	const stream = await client.completions.create({
		model, prompt: "package main", max_tokens: 10, temperature: 0, stream: true, ignore_eos: true,
		stream_options: { include_usage: true },
	});
	let text = "";
	let finish = null;
	let usage = null;
	for await (const chunk of stream) {
		for (const c of chunk.choices) {
			text += c.text;
			if (c.finish_reason) finish = c.finish_reason;
		}
		if (chunk.usage) usage = chunk.usage;
	}
	const whole = await client.completions.create({ model, prompt: "package main", max_tokens: 10, temperature: 0, ignore_eos: true });
	assert(text === whole.choices[0].text, `streamed ${JSON.stringify(text)} != ${JSON.stringify(whole.choices[0].text)}`);
	assert(finish === "length", `finish_reason ${finish}`);
	assert(usage && usage.completion_tokens === 10, `usage ${JSON.stringify(usage)}`);
});

await check("chat", async () => {
	const r = await client.chat.completions.create({
		model, max_tokens: 8, temperature: 0,
		messages: [{ role: "system", content: "You write Go." }, { role: "user", content: "A loop, please." }],
	});
	assert(r.object === "chat.completion", r.object);
	assert(r.choices[0].message.role === "assistant" && typeof r.choices[0].message.content === "string", JSON.stringify(r.choices[0]));
	assert(r.usage.completion_tokens > 0, JSON.stringify(r.usage));
});

await check("chat stream", async () => {
	const stream = await client.chat.completions.create({
		model, max_completion_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true }, ignore_eos: true,
		messages: [{ role: "user", content: [{ type: "text", text: "Hello" }] }],
	});
	let role = null;
	let text = "";
	let finish = null;
	let usage = null;
	for await (const chunk of stream) {
		assert(chunk.object === "chat.completion.chunk", chunk.object);
		for (const c of chunk.choices) {
			if (c.delta.role) role = c.delta.role;
			assert(finish === null, `a chunk after the finish_reason: ${JSON.stringify(chunk)}`);
			if (c.delta.content) text += c.delta.content;
			if (c.finish_reason) {
				// OpenAI ends a streamed choice with a chunk of an empty delta and the finish_reason.
				assert(Object.keys(c.delta).length === 0, `finish chunk with a delta: ${JSON.stringify(chunk)}`);
				finish = c.finish_reason;
			}
		}
		if (chunk.usage) usage = chunk.usage;
	}
	assert(role === "assistant", `role ${role}`);
	assert(finish === "length", `finish_reason ${finish}`);
	assert(usage && usage.completion_tokens === 8, JSON.stringify(usage));
	assert(text.length > 0, "no content");
});

await check("stop strings", async () => {
	const full = await client.completions.create({ model, prompt: "func main() {", max_tokens: 24, temperature: 0, ignore_eos: true });
	const text = full.choices[0].text;
	assert(text.length >= 6, `continuation too short: ${JSON.stringify(text)}`);
	const stop = text.slice(3, 6);
	const r = await client.completions.create({ model, prompt: "func main() {", max_tokens: 24, temperature: 0, ignore_eos: true, stop: [stop, "\u0000never"] });
	assert(r.choices[0].text === text.slice(0, text.indexOf(stop)), `stop ${JSON.stringify(stop)}: ${JSON.stringify(r.choices[0].text)} vs ${JSON.stringify(text)}`);
	assert(r.choices[0].finish_reason === "stop", r.choices[0].finish_reason);
});

await check("finish_reason length", async () => {
	const r = await client.chat.completions.create({ model, max_tokens: 3, ignore_eos: true, messages: [{ role: "user", content: "Hi" }] });
	assert(r.choices[0].finish_reason === "length" && r.usage.completion_tokens === 3, JSON.stringify(r));
});

await check("seed reproducibility", async () => {
	const req = { model, prompt: "type Reader", max_tokens: 16, temperature: 1, seed: 4242, ignore_eos: true };
	const a = await client.completions.create(req);
	const b = await client.completions.create(req);
	assert(a.choices[0].text === b.choices[0].text, `${JSON.stringify(a.choices[0].text)} != ${JSON.stringify(b.choices[0].text)}`);
});

await check("n = 2", async () => {
	const r = await client.chat.completions.create({ model, n: 2, max_tokens: 6, seed: 7, messages: [{ role: "user", content: "Go?" }] });
	assert(r.choices.length === 2 && r.choices[0].index === 0 && r.choices[1].index === 1, JSON.stringify(r.choices));
});

await check("best_of", async () => {
	// The official client sends best_of as the completions API defines it: the server returns the n of
	// best_of choices with the highest mean logprob, counts all of them, and refuses to stream them.
	const r = await client.completions.create({ model, prompt: "package main", n: 2, best_of: 3, max_tokens: 5, seed: 3, ignore_eos: true });
	assert(r.choices.length === 2 && r.choices[0].index === 0 && r.choices[1].index === 1, JSON.stringify(r.choices));
	assert(r.usage.completion_tokens === 15, `usage ${JSON.stringify(r.usage)}`);
	await expectStatus(400, () => client.completions.create({ model, prompt: "x", best_of: 2, max_tokens: 2, stream: true }));
});

await check("logprobs", async () => {
	const c = await client.chat.completions.create({ model, max_tokens: 4, logprobs: true, top_logprobs: 2, ignore_eos: true, messages: [{ role: "user", content: "x" }] });
	const content = c.choices[0].logprobs.content;
	assert(content.length === 4 && content[0].top_logprobs.length === 2 && content[0].logprob <= 0, JSON.stringify(c.choices[0].logprobs));
	const t = await client.completions.create({ model, prompt: "func", max_tokens: 4, logprobs: 2, ignore_eos: true });
	const lp = t.choices[0].logprobs;
	assert(lp.tokens.length === 4 && lp.token_logprobs.length === 4 && lp.tokens.join("") === t.choices[0].text, JSON.stringify(lp));
});

await check("echo with logprobs", async () => {
	// lm-eval-harness' loglikelihood request: the prompt's logprobs (null for its first token), then
	// the one generated token's.
	const prompt = "func main() {";
	const r = await client.completions.create({ model, prompt, max_tokens: 1, logprobs: 1, echo: true, temperature: 0 });
	const c = r.choices[0];
	const lp = c.logprobs;
	const n = r.usage.prompt_tokens + r.usage.completion_tokens;
	assert(c.text.startsWith(prompt), `text ${JSON.stringify(c.text)} does not echo the prompt`);
	assert(lp.token_logprobs[0] === null && lp.top_logprobs[0] === null, `first entry not null: ${JSON.stringify(lp)}`);
	assert(lp.tokens.length === n && lp.token_logprobs.length === n && lp.top_logprobs.length === n && lp.text_offset.length === n,
		`lengths ${lp.tokens.length} ${lp.token_logprobs.length} ${lp.top_logprobs.length} ${lp.text_offset.length}, want ${n}: ${JSON.stringify(lp)}`);
	assert(lp.token_logprobs.slice(1).every((v) => typeof v === "number" && v <= 0), JSON.stringify(lp.token_logprobs));
	assert(lp.text_offset[0] === 0 && lp.text_offset.every((o, i) => i === 0 || o >= lp.text_offset[i - 1]), JSON.stringify(lp.text_offset));
});

await check("prompt_logprobs (vLLM's extension, sent as an extra body field)", async () => {
	// The SDK sends properties it does not know in the body as they are, and leaves those of the
	// response in place. Each prompt token's entry holds the token (and the echo's logprob for it).
	const prompt = "func main() {";
	const r = await client.completions.create({ model, prompt, max_tokens: 1, temperature: 0, prompt_logprobs: 2 });
	const pl = r.choices[0].prompt_logprobs;
	const e = await client.completions.create({ model, prompt, max_tokens: 1, temperature: 0, echo: true, logprobs: 1 });
	const lp = e.choices[0].logprobs;
	assert(Array.isArray(pl) && pl.length === r.usage.prompt_tokens && pl[0] === null, `prompt_logprobs ${JSON.stringify(pl)}`);
	for (let j = 1; j < pl.length; j++) {
		const entries = Object.entries(pl[j]);
		assert(entries.length >= 2 && entries.length <= 3 && entries.every(([id, v]) => /^\d+$/.test(id) && v.logprob <= 0 && v.rank >= 1 && typeof v.decoded_token === "string"),
			`prompt_logprobs[${j}] ${JSON.stringify(pl[j])}`);
		assert(entries.some(([, v]) => v.decoded_token === lp.tokens[j] && Math.abs(v.logprob - lp.token_logprobs[j]) < 1e-3),
			`prompt_logprobs[${j}] ${JSON.stringify(pl[j])} lacks the echo's token ${JSON.stringify(lp.tokens[j])} at ${lp.token_logprobs[j]}`);
	}
	const c = await client.chat.completions.create({ model, max_tokens: 2, prompt_logprobs: 0, messages: [{ role: "user", content: "x" }] });
	assert(c.prompt_logprobs.length === c.usage.prompt_tokens && c.prompt_logprobs.slice(1).every((p) => Object.keys(p).length === 1),
		`chat prompt_logprobs ${JSON.stringify(c.prompt_logprobs)}`);
	const err = await expectStatus(400, () => client.completions.create({ model, prompt, max_tokens: 1, stream: true, prompt_logprobs: 1 }));
	assert(err.param === "prompt_logprobs", `param ${err.param}`);
});

await check("usage.prompt_tokens_details.cached_tokens", async () => {
	// A prompt of several 16-token pages, sent twice: the second finds its full pages in the prefix cache.
	const prompt = "func main() { fmt.Println(\"cached\") }\n".repeat(6);
	const a = await client.completions.create({ model, prompt, max_tokens: 1 });
	const b = await client.completions.create({ model, prompt, max_tokens: 1 });
	const cached = (r) => r.usage.prompt_tokens_details?.cached_tokens;
	assert(cached(a) === 0, `first: ${JSON.stringify(a.usage)}`);
	assert(cached(b) >= 32 && cached(b) < b.usage.prompt_tokens && cached(b) % 16 === 0, `second: ${JSON.stringify(b.usage)}`);
	const c = await client.chat.completions.create({ model, max_tokens: 1, messages: [{ role: "user", content: prompt }] });
	assert(typeof cached(c) === "number", `chat usage ${JSON.stringify(c.usage)}`);
});

await check("include_stop_str_in_output (vLLM's extension), whole and streamed", async () => {
	const full = await client.completions.create({ model, prompt: "func main() {", max_tokens: 24, temperature: 0, ignore_eos: true });
	const text = full.choices[0].text;
	const stop = text.slice(3, 6);
	const want = text.slice(0, text.indexOf(stop)) + stop;
	const req = { model, prompt: "func main() {", max_tokens: 24, temperature: 0, ignore_eos: true, stop: [stop], include_stop_str_in_output: true };
	const r = await client.completions.create(req);
	assert(r.choices[0].text === want && r.choices[0].finish_reason === "stop", `${JSON.stringify(r.choices[0])}, want text ${JSON.stringify(want)}`);
	let streamed = "";
	for await (const chunk of await client.completions.create({ ...req, stream: true })) {
		for (const c of chunk.choices) streamed += c.text;
	}
	assert(streamed === want, `streamed ${JSON.stringify(streamed)}, want ${JSON.stringify(want)}`);
});

// Structured outputs and tool calls: the tiny built-in model writes valid output only because the
// server constrains it, which is what these check (at temperature 1, seeded).
const Person = z.object({
	name: z.string().max(8),
	age: z.number().int().min(0).max(120),
	langs: z.array(z.enum(["go", "rust", "c"])).max(2),
	nick: z.string().max(6).nullable(),
});

await check("chat.completions.parse with a zod schema", async () => {
	for (const seed of [1, 2, 3]) {
		const r = await client.chat.completions.parse({
			model, max_tokens: 200, temperature: 1, seed,
			messages: [{ role: "user", content: "Describe a programmer." }],
			response_format: zodResponseFormat(Person, "person"),
		});
		const m = r.choices[0].message;
		assert(r.choices[0].finish_reason === "stop", `seed ${seed}: finish_reason ${r.choices[0].finish_reason}: ${m.content}`);
		assert(m.parsed && Person.parse(m.parsed) && JSON.stringify(m.parsed) === JSON.stringify(JSON.parse(m.content)), `seed ${seed}: parsed ${JSON.stringify(m.parsed)} from ${m.content}`);
	}
});

await check("response_format json_object, streamed, n = 2", async () => {
	const stream = await client.chat.completions.create({
		model, max_tokens: 120, temperature: 1, seed: 4, n: 2, stream: true,
		messages: [{ role: "user", content: "JSON, please." }], response_format: { type: "json_object" },
	});
	const text = ["", ""];
	const finish = [null, null];
	for await (const chunk of stream) {
		for (const c of chunk.choices) {
			if (c.delta.content) text[c.index] += c.delta.content;
			if (c.finish_reason) finish[c.index] = c.finish_reason;
		}
	}
	for (const i of [0, 1]) {
		assert(finish[i] === "stop" || finish[i] === "length", `choice ${i}: finish_reason ${finish[i]}`);
		if (finish[i] === "stop") {
			const v = JSON.parse(text[i]);
			assert(v !== null && typeof v === "object" && !Array.isArray(v), `choice ${i}: ${text[i]}`);
		}
	}
});

await check("vLLM's structured_outputs and guided_choice (extra body fields), completions and chat", async () => {
	const c = await client.completions.create({ model, prompt: "Date:", max_tokens: 32, temperature: 1, seed: 5,
		structured_outputs: { regex: "[0-9]{4}-[0-9]{2}-[0-9]{2}" } });
	assert(/^[0-9]{4}-[0-9]{2}-[0-9]{2}$/.test(c.choices[0].text) && c.choices[0].finish_reason === "stop", JSON.stringify(c.choices[0]));
	const r = await client.chat.completions.create({ model, max_tokens: 8, temperature: 1, seed: 6,
		messages: [{ role: "user", content: "Pick one." }], guided_choice: ["alpha", "beta", "gamma"] });
	assert(["alpha", "beta", "gamma"].includes(r.choices[0].message.content), JSON.stringify(r.choices[0]));
});

const weatherTool = zodFunction({
	name: "get_weather",
	description: "The forecast for a city.",
	parameters: z.object({ city: z.string().max(12), days: z.number().int().min(1).max(7) }),
});
const timeTool = zodFunction({ name: "get_time", description: "The time now.", parameters: z.object({}) });
const question = { role: "user", content: "What is the weather in Paris this week?" };

await check("tool_choice named: parse with zod tools", async () => {
	const r = await client.chat.completions.parse({
		model, max_tokens: 200, temperature: 1, seed: 7, messages: [question], tools: [weatherTool, timeTool],
		tool_choice: { type: "function", function: { name: "get_weather" } },
	});
	const m = r.choices[0].message;
	assert(r.choices[0].finish_reason === "tool_calls" && m.content === null && m.tool_calls.length === 1, JSON.stringify(r.choices[0]));
	const call = m.tool_calls[0];
	assert(call.type === "function" && call.id.startsWith("call_") && call.function.name === "get_weather", JSON.stringify(call));
	assert(call.function.parsed_arguments && call.function.parsed_arguments.days >= 1, `parsed ${JSON.stringify(call.function.parsed_arguments)} from ${call.function.arguments}`);
});

await check("tool calls streamed (the SDK's stream helper) equal the whole response", async () => {
	const req = { model, max_tokens: 700, temperature: 1, seed: 8, messages: [question], tools: [weatherTool, timeTool], tool_choice: "required" };
	const whole = await client.chat.completions.parse(req);
	const stream = client.chat.completions.stream(req);
	let deltas = 0;
	stream.on("tool_calls.function.arguments.delta", () => deltas++);
	const final = await stream.finalChatCompletion();
	const a = whole.choices[0], b = final.choices[0];
	assert(a.finish_reason === "tool_calls" && b.finish_reason === "tool_calls", `${a.finish_reason} ${b.finish_reason}`);
	assert(a.message.tool_calls.length >= 1 && a.message.tool_calls.length === b.message.tool_calls.length, JSON.stringify([a.message, b.message]));
	for (let i = 0; i < a.message.tool_calls.length; i++) {
		const x = a.message.tool_calls[i].function, y = b.message.tool_calls[i].function;
		assert(x.name === y.name && x.arguments === y.arguments, `call ${i}: ${JSON.stringify(x)} vs streamed ${JSON.stringify(y)}`);
		assert(y.parsed_arguments !== undefined && y.parsed_arguments !== null, `call ${i} not parsed: ${JSON.stringify(y)}`);
	}
	assert(deltas >= a.message.tool_calls.length, `${deltas} argument deltas`);
});

await check("tool_choice required, parallel_tool_calls false: one call", async () => {
	const r = await client.chat.completions.create({
		model, max_tokens: 200, temperature: 1, seed: 9, messages: [question], tools: [weatherTool, timeTool],
		tool_choice: "required", parallel_tool_calls: false,
	});
	assert(r.choices[0].finish_reason === "tool_calls" && r.choices[0].message.tool_calls.length === 1, JSON.stringify(r.choices[0]));
});

await check("a multi-turn tool conversation", async () => {
	const messages = [{ role: "system", content: "You answer with tools." }, question];
	const first = await client.chat.completions.create({
		model, max_tokens: 200, temperature: 1, seed: 10, messages, tools: [weatherTool, timeTool],
		tool_choice: { type: "function", function: { name: "get_weather" } },
	});
	const m = first.choices[0].message;
	messages.push(m);
	messages.push({ role: "tool", tool_call_id: m.tool_calls[0].id, content: JSON.stringify({ forecast: "sunny", high: 21 }) });
	messages.push({ role: "user", content: "And what time is it?" });
	const second = await client.chat.completions.create({
		model, max_tokens: 100, temperature: 1, seed: 11, messages, tools: [weatherTool, timeTool],
		tool_choice: { type: "function", function: { name: "get_time" } },
	});
	const c = second.choices[0];
	assert(c.finish_reason === "tool_calls" && c.message.tool_calls[0].function.name === "get_time" &&
		JSON.stringify(JSON.parse(c.message.tool_calls[0].function.arguments)) === "{}", JSON.stringify(c));
	messages.push(c.message);
	messages.push({ role: "tool", tool_call_id: c.message.tool_calls[0].id, content: "12:00 UTC" });
	const third = await client.chat.completions.create({ model, max_tokens: 8, messages, tools: [weatherTool, timeTool], tool_choice: "none" });
	assert(third.choices[0].message.tool_calls === undefined && typeof third.choices[0].message.content === "string", JSON.stringify(third.choices[0]));
});

await check("error 400 for fields gollm does not implement, by name", async () => {
	const messages = [{ role: "user", content: "x" }];
	for (const [extra, param] of [
		[{ response_format: { type: "xml" } }, "response_format.type"],
		[{ structured_outputs: { json: {}, whitespace_pattern: " " } }, "structured_outputs.whitespace_pattern"],
		[{ guided_json: { type: "object" }, guided_decoding_backend: "outlines" }, "guided_decoding_backend"],
		[{ tools: [{ type: "retrieval" }] }, "tools[0].type"],
		[{ functions: [{ name: "f" }] }, "functions"],
		[{ frobnicate: 1 }, "frobnicate"],
	]) {
		const e = await expectStatus(400, () => client.chat.completions.create({ model, max_tokens: 1, messages, ...extra }));
		assert(e instanceof OpenAI.BadRequestError && e.param === param && e.code === "unsupported_parameter" && e.message.includes(`'${param}'`),
			`${JSON.stringify(extra)}: param ${e.param}, code ${e.code}: ${e.message}`);
	}
	const bad = await expectStatus(400, () => client.chat.completions.create({ model, max_tokens: 1, messages,
		response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", not: {} } } } }));
	assert(bad.param === "response_format.json_schema.schema" && bad.message.includes('"not"'), `${bad.param}: ${bad.message}`);
	const two = await expectStatus(400, () => client.chat.completions.create({ model, max_tokens: 1, messages, response_format: { type: "json_object" }, guided_regex: "a" }));
	assert(two.message.includes("'response_format'") && two.message.includes("'guided_regex'"), two.message);
	const ok = await client.chat.completions.create({ model, max_tokens: 1, messages, response_format: { type: "text" } });
	assert(ok.choices.length === 1, JSON.stringify(ok));
});

await check("health and metrics", async () => {
	const h = await fetch(`${base}/health`);
	assert(h.status === 200, `health ${h.status}`);
	const m = await fetch(`${base}/metrics`, { headers: { Authorization: `Bearer ${apiKey}` } });
	const text = await m.text();
	assert(m.status === 200 && text.includes(`gollm:num_requests_running{model_name="${model}"}`), `metrics ${m.status}: ${text.slice(0, 300)}`);
});

await check("error 401 wrong key", async () => {
	const bad = new OpenAI({ baseURL: `${base}/v1`, apiKey: apiKey + "x", maxRetries: 0 });
	const e = await expectStatus(401, () => bad.models.list());
	assert(e instanceof OpenAI.AuthenticationError, "not an AuthenticationError");
});

await check("error 404 unknown model", async () => {
	const e = await expectStatus(404, () => client.completions.create({ model: "no-such-model", prompt: "x", max_tokens: 1 }));
	assert(e instanceof OpenAI.NotFoundError && e.code === "model_not_found", `code ${e.code}`);
});

await check("error 400 bad field", async () => {
	const e = await expectStatus(400, () => client.chat.completions.create({ model, temperature: 5, messages: [{ role: "user", content: "x" }] }));
	assert(e instanceof OpenAI.BadRequestError && e.param === "temperature", `param ${e.param}`);
});

await check("error 400 prompt longer than the context", async () => {
	await expectStatus(400, () => client.completions.create({ model, prompt: "x ".repeat(4000), max_tokens: 1 }));
});

await check("error 413 body too large", async () => {
	await expectStatus(413, () => client.completions.create({ model, prompt: "y".repeat(maxBody + 1000), max_tokens: 1 }));
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
