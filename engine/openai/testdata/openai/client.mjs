// client.mjs drives a running `gollm serve` with the official openai npm client, unmodified: every
// response goes through the SDK's own parsing. .ci/after.d/30-openai-client.sh starts the server and
// runs it with GOLLM_URL (http://127.0.0.1:PORT), GOLLM_API_KEY and GOLLM_MAX_BODY (the server's
// --max-body-bytes). It prints "N passed, N failed" and exits non-zero on any failure.
import OpenAI from "openai";

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
			if (c.delta.content) text += c.delta.content;
			if (c.finish_reason) finish = c.finish_reason;
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

await check("error 400 for fields gollm does not implement, by name", async () => {
	const messages = [{ role: "user", content: "x" }];
	for (const [extra, param] of [
		[{ response_format: { type: "json_object" } }, "response_format"],
		[{ tools: [{ type: "function", function: { name: "f", parameters: {} } }] }, "tools"],
		[{ tool_choice: "required" }, "tool_choice"],
		[{ guided_json: { type: "object" } }, "guided_json"],
		[{ frobnicate: 1 }, "frobnicate"],
	]) {
		const e = await expectStatus(400, () => client.chat.completions.create({ model, max_tokens: 1, messages, ...extra }));
		assert(e instanceof OpenAI.BadRequestError && e.param === param && e.code === "unsupported_parameter" && e.message.includes(`'${param}'`),
			`${JSON.stringify(extra)}: param ${e.param}, code ${e.code}: ${e.message}`);
	}
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
