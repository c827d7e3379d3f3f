// Validates constrained outputs for engine/constraint's tests: JSON outputs by ajv (draft 2020-12,
// with ajv-formats), regex outputs by JavaScript's RegExp (the whole output must match, with the
// u flag). Usage: node validate.mjs CASES.json; prints {"checked": N, "invalid": [...]}.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(new URL("./npm/", import.meta.url));
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats").default;

const ajv = new Ajv2020({ strict: false, allErrors: false });
addFormats(ajv);

const { cases } = JSON.parse(readFileSync(process.argv[2], "utf8"));
let checked = 0;
const invalid = [];
for (const [i, c] of cases.entries()) {
	let check;
	if (c.kind === "json_schema") {
		const validate = ajv.compile(c.schema);
		check = (text) => {
			let value;
			try {
				value = JSON.parse(text);
			} catch (e) {
				return "JSON.parse: " + e.message;
			}
			return validate(value) ? null : ajv.errorsText(validate.errors);
		};
	} else if (c.kind === "regex") {
		const re = new RegExp("^(?:" + c.regex + ")$", "u");
		check = (text) => (re.test(text) ? null : "no match for /" + c.regex + "/");
	} else {
		throw new Error("unknown kind " + c.kind);
	}
	for (const output of c.outputs) {
		checked++;
		const err = check(output);
		if (err) invalid.push({ case: i, output, error: err });
	}
}
console.log(JSON.stringify({ checked, invalid }));
