package openai

import (
	"encoding/json"
	"strings"
)

// Tool-call parsers: they read a model's output as it streams and split it into content and tool
// calls, in the three forms chat templates teach models:
//
//	hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call> (Qwen2.5, Qwen3, Hermes),
//	             one block per call
//	llama3_json  {"name": "f", "parameters": {...}} as the whole output (Llama 3.1 and later), an
//	             optional <|python_tag|> before it, calls separated by ";"
//	mistral      [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...] (Mistral 7B v0.3, Nemo: tokenizers
//	             before v11), or [TOOL_CALLS]f[ARGS]{...} per call (Mistral Small 3.1+, Magistral,
//	             Devstral: v11 and later; a [CALL_ID]id between the name and [ARGS] is skipped);
//	             what follows the tag decides: "[" a list, a name's byte a call of the newer form
//
// A parser is fed the output's text piece by piece (feed) and then told it ended (finish); it
// reports events: content, the start of a call (its name), and pieces of a call's arguments, each
// the raw JSON text of the arguments value as the model wrote it (so the pieces of a streamed call
// join to the complete response's arguments). It is a byte-level state machine, so what the events
// add up to does not depend on how the text was split (FuzzToolParsers checks it); the complete
// response is the same parser fed the whole text.
//
// The rules, in every form: the content is the text before the first call, its trailing white space
// dropped (in a stream, white space is held back until something else follows it); once a call has
// begun, text outside calls is dropped, as vLLM drops it (Hermes' blocks after such text are still
// calls; Llama's calls end at text other than ";", Mistral's at the end of the list, or in its newer
// form at text other than the next call's tag). A call is reported once its name is known and its
// arguments begin (arguments written before the name are held until the name ends); a call object
// without arguments gets "{}". Mistral's newer form has its name up to [ARGS], then one JSON object
// or array as the arguments, ended by its closing bracket. Text that looked like a call but is not
// one (broken JSON, no name, a name not followed by [ARGS]) before any call began is content after
// all; after a call began, it ends the parsing.

// Tool-call parser names (Config.ToolCallParser, gollm serve --tool-call-parser).
const (
	ToolParserHermes     = "hermes"
	ToolParserLlama3JSON = "llama3_json"
	ToolParserMistral    = "mistral"
)

// ToolParsers are the tool-call parsers the server has.
var ToolParsers = []string{ToolParserHermes, ToolParserLlama3JSON, ToolParserMistral}

// DetectToolParser returns the tool-call parser a chat template's text teaches its model, or "" when
// the template renders no tools it recognises: Hermes' <tool_call> tags, Mistral's [TOOL_CALLS], or
// Llama 3.1's JSON form (its <|python_tag|>, or its instruction to answer with {"name": ...,
// "parameters": ...}).
func DetectToolParser(template string) string {
	switch {
	case strings.Contains(template, "<tool_call>"):
		return ToolParserHermes
	case strings.Contains(template, "[TOOL_CALLS]"):
		return ToolParserMistral
	case strings.Contains(template, "<|python_tag|>"),
		strings.Contains(template, `"parameters": dictionary of argument name and its value`):
		return ToolParserLlama3JSON
	}
	return ""
}

// toolEventKind is what a toolEvent reports.
type toolEventKind uint8

const (
	evContent   toolEventKind = iota // text: content
	evCallStart                      // a call begins: call, name
	evArgs                           // text: a piece of call's arguments
)

// toolEvent is one thing a parser reports.
type toolEvent struct {
	kind toolEventKind
	call int
	name string
	text string
}

// toolParser splits a model's output into content and tool calls (see the comment above).
type toolParser interface {
	feed(text string) []toolEvent
	finish() []toolEvent
}

// newToolParser returns a parser of form name. afterTag says the output begins after the form's
// opening tag (Mistral's [TOOL_CALLS], when the server put it at the end of the prompt).
func newToolParser(name string, afterTag bool) toolParser {
	p := &formParser{form: name}
	switch name {
	case ToolParserHermes:
		p.tag, p.closeTag, p.argsKeys = "<tool_call>", "</tool_call>", []string{"arguments", "parameters"}
	case ToolParserMistral:
		p.tag, p.argsKeys = mistralTag, []string{"arguments", "parameters"}
	case ToolParserLlama3JSON:
		p.argsKeys = []string{"parameters", "arguments"}
		p.st = dLead
	default:
		panic("openai: unknown tool parser " + name)
	}
	if afterTag {
		p.st = dAfterTag
	}
	return p
}

// driver states of formParser.
type driverState uint8

const (
	dContent  driverState = iota // content, watching for the tag (hermes, mistral)
	dLead                        // llama3_json: before the first non-space byte (and an optional <|python_tag|>)
	dAfterTag                    // after the tag: white space, then "[" or a name (mistral) or the call object
	dName                        // mistral's newer form: in the name, before [ARGS] (or [CALL_ID])
	dNameTag                     // mistral's newer form: in [ARGS] or [CALL_ID] after the name (or the id)
	dCallID                      // mistral's newer form: in the call id after [CALL_ID]
	dCall                        // in a call object (scanner)
	dClose                       // hermes: after a call object, expecting </tool_call>
	dNext                        // after a call: white space, then the next call's tag or separator
	dListNext                    // mistral: after a call in the list: "," or "]"
	dPlain                       // llama3_json: the output is content, not calls
	dDone                        // nothing more is parsed
)

// formParser is every form's parser: one driver over the call object scanner.
type formParser struct {
	form          string
	tag, closeTag string
	argsKeys      []string
	st            driverState
	pend          []byte // content that may begin the tag, or held white space
	match         int    // bytes of the tag (or closing tag, python tag) matched so far
	raw           []byte // the output since the current call attempt began (its text, for a fallback to content)
	sc            callScanner
	calls         int    // calls begun
	inList        bool   // mistral: inside the [ ... ] list
	name          []byte // mistral's newer form: the call's name so far
	nameTag       string // mistral's newer form: the tag after the name being matched ([ARGS] or [CALL_ID])
	haveID        bool   // mistral's newer form: the call's [CALL_ID] was passed
	out           []toolEvent
}

func (p *formParser) emitContent(s string) {
	if s == "" {
		return
	}
	if n := len(p.out); n > 0 && p.out[n-1].kind == evContent {
		p.out[n-1].text += s
		return
	}
	p.out = append(p.out, toolEvent{kind: evContent, text: s})
}

func (p *formParser) emitArgs(call int, s string) {
	if s == "" {
		return
	}
	if n := len(p.out); n > 0 && p.out[n-1].kind == evArgs && p.out[n-1].call == call {
		p.out[n-1].text += s
		return
	}
	p.out = append(p.out, toolEvent{kind: evArgs, call: call, text: s})
}

func (p *formParser) feed(text string) []toolEvent {
	p.out = nil
	for i := 0; i < len(text); i++ {
		p.step(text[i])
	}
	p.flushContent(false)
	p.sc.flush(p)
	return p.out
}

func (p *formParser) finish() []toolEvent {
	p.out = nil
	switch p.st {
	case dCall:
		p.sc.flush(p)
		if !p.sc.started {
			p.fallback(false)
		}
	case dAfterTag, dName, dNameTag, dCallID:
		if p.calls == 0 {
			p.fallback(false)
		}
	}
	p.flushContent(true)
	p.st = dDone
	return p.out
}

// flushContent emits the content held back (pend): at the end, all of it; before, in content, what can
// no longer begin the tag, and white space only once something else follows it. Before llama3_json's
// first byte that decides (dLead), nothing.
func (p *formParser) flushContent(end bool) {
	if len(p.pend) == 0 || p.st != dContent && p.st != dLead {
		return
	}
	if end {
		p.emitContent(string(p.pend))
		p.pend = p.pend[:0]
		return
	}
	if p.st == dLead {
		return
	}
	keep := p.match // a partial tag, and the white space before it
	for keep < len(p.pend) && isSpace(p.pend[len(p.pend)-1-keep]) {
		keep++
	}
	if keep < len(p.pend) {
		p.emitContent(string(p.pend[:len(p.pend)-keep]))
		p.pend = append(p.pend[:0], p.pend[len(p.pend)-keep:]...)
	}
}

// fallback turns the current call attempt's text back into content, when no call has begun (else
// the parsing ends), and parses on as content. broke says the attempt's last byte is the one that
// broke it: it is parsed again as content, since it may begin a tag.
func (p *formParser) fallback(broke bool) {
	if p.calls > 0 {
		p.st = dDone
		return
	}
	text := p.raw
	p.raw = nil
	if p.form == ToolParserLlama3JSON {
		p.st = dPlain
		p.emitContent(string(text))
		return
	}
	// Content again: a new attempt starts from nothing (Mistral's list not open), and the text taken
	// back may end with the beginning of the tag (Mistral's "[" that seemed to open the list).
	p.st = dContent
	p.inList = false
	if !broke || len(text) == 0 {
		p.pend = append(p.pend, text...)
		p.match = tagPrefix(p.pend, p.tag)
		return
	}
	p.pend = append(p.pend, text[:len(text)-1]...)
	p.match = tagPrefix(p.pend, p.tag)
	p.contentByte(text[len(text)-1])
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// contentByte takes one byte of content, watching for the tag.
func (p *formParser) contentByte(c byte) {
	p.pend = append(p.pend, c)
	if c == p.tag[p.match] {
		p.match++
		if p.match == len(p.tag) {
			// The tag: the content ends before it, its trailing white space dropped.
			body := p.pend[:len(p.pend)-len(p.tag)]
			end := len(body)
			for end > 0 && isSpace(body[end-1]) {
				end--
			}
			p.emitContent(string(body[:end]))
			p.raw = append(p.raw[:0], p.pend[end:]...) // the white space and the tag, should this be no call
			p.pend = p.pend[:0]
			p.match = 0
			p.st = dAfterTag
		}
		return
	}
	// A mismatch: the longest suffix of the text matched so far that still begins the tag.
	p.match = tagPrefix(p.pend[len(p.pend)-min(len(p.pend), p.match+1):], p.tag)
}

// tagPrefix returns the length of the longest suffix of b that is a prefix of tag.
func tagPrefix(b []byte, tag string) int {
	for n := min(len(b), len(tag)-1); n > 0; n-- {
		if string(b[len(b)-n:]) == tag[:n] {
			return n
		}
	}
	return 0
}

const pythonTag = "<|python_tag|>"

func (p *formParser) step(c byte) {
	switch p.st {
	case dContent:
		p.contentByte(c)
	case dPlain:
		p.emitContent(string([]byte{c}))
	case dLead:
		p.pend = append(p.pend, c)
		switch {
		case p.match < len(pythonTag) && c == pythonTag[p.match] && len(strings.TrimLeft(string(p.pend), " \n\t\r")) == p.match+1:
			p.match++
			if p.match == len(pythonTag) {
				p.st = dAfterTag
				p.raw = append(p.raw[:0], p.pend...)
				p.pend = p.pend[:0]
			}
		case isSpace(c) && p.match == 0:
		case c == '{' && p.match == 0:
			p.raw = append(p.raw[:0], p.pend[:len(p.pend)-1]...)
			p.pend = p.pend[:0]
			p.startCall()
			p.callByte(c)
		default:
			p.st = dPlain
			p.emitContent(string(p.pend))
			p.pend = p.pend[:0]
			p.match = 0
		}
	case dAfterTag:
		p.raw = append(p.raw, c)
		switch {
		case isSpace(c):
		case p.form == ToolParserMistral && !p.inList:
			switch {
			case c == '[' && p.calls == 0: // the list (after a call of the newer form, more of those only)
				p.inList = true
			case isNameByte(c): // a call of the newer form
				p.name = append(p.name[:0], c)
				p.haveID = false
				p.st = dName
			default:
				p.fallback(true)
			}
		case c == '{':
			p.raw = p.raw[:len(p.raw)-1]
			p.startCall()
			p.callByte(c)
		default:
			p.fallback(true)
		}
	case dName:
		p.raw = append(p.raw, c)
		switch {
		case isNameByte(c):
			p.name = append(p.name, c)
		case c == '[':
			p.match, p.nameTag, p.st = 1, "", dNameTag
		default:
			p.fallback(true)
		}
	case dNameTag:
		p.raw = append(p.raw, c)
		if p.nameTag == "" { // the byte after "[" decides which tag it is
			p.nameTag = argsTag
			if c == callIDTag[1] && !p.haveID {
				p.nameTag = callIDTag
			}
		}
		if c != p.nameTag[p.match] {
			p.fallback(true)
			return
		}
		if p.match++; p.match < len(p.nameTag) {
			return
		}
		p.match = 0
		if p.nameTag == callIDTag {
			p.haveID = true
			p.st = dCallID
			return
		}
		// The arguments' value follows: the scanner takes it as the value of an arguments key whose
		// call's name is known.
		p.startCall()
		p.sc.haveName, p.sc.nameStr = true, string(p.name)
		p.sc.key = append(p.sc.key[:0], "arguments"...)
		p.sc.st = sValue
	case dCallID:
		p.raw = append(p.raw, c)
		switch {
		case isNameByte(c):
		case c == '[':
			p.match, p.nameTag, p.st = 1, argsTag, dNameTag
		default:
			p.fallback(true)
		}
	case dCall:
		p.callByte(c)
	case dClose:
		if p.match == 0 && isSpace(c) {
			return
		}
		if c == p.closeTag[p.match] {
			p.match++
			if p.match == len(p.closeTag) {
				p.match = 0
				p.st = dNext
			}
			return
		}
		// No closing tag: the call is over all the same, and what follows it (the bytes that seemed to
		// begin the closing tag included) is text between calls.
		seen := p.closeTag[:p.match] + string(c)
		p.match = 0
		p.st = dNext
		for i := 0; i < len(seen); i++ {
			p.step(seen[i])
		}
	case dNext:
		if isSpace(c) && p.match == 0 {
			return
		}
		sep := p.tag
		if p.form == ToolParserLlama3JSON {
			sep = ";"
		}
		if c == sep[p.match] {
			p.match++
			if p.match == len(sep) {
				p.match = 0
				p.st = dAfterTag
				p.raw = p.raw[:0]
			}
			return
		}
		if p.form == ToolParserHermes {
			// Text between Hermes' blocks is dropped, and the next block is a call all the same (as
			// vLLM's hermes parser finds every block of the output).
			p.match = tagPrefix([]byte(p.tag[:p.match]+string(c)), p.tag)
			return
		}
		p.st = dDone
	case dListNext:
		switch {
		case isSpace(c):
		case c == ',':
			p.st = dAfterTag
		default: // "]" or anything else: the list is over
			p.st = dDone
		}
	}
}

// mistralTag opens Mistral's calls: its list, or each call of its newer form.
const mistralTag = "[TOOL_CALLS]"

// The tags of Mistral's newer form between a call's name and its arguments.
const (
	argsTag   = "[ARGS]"
	callIDTag = "[CALL_ID]"
)

// isNameByte reports whether c may be in a function's name (or a call id) of Mistral's newer form:
// what OpenAI allows in a function's name.
func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// startCall begins scanning a call object.
func (p *formParser) startCall() {
	p.st = dCall
	p.sc = callScanner{call: p.calls, argsKeys: p.argsKeys}
}

// callByte feeds the call scanner one byte and moves on when the object ends or breaks.
func (p *formParser) callByte(c byte) {
	p.raw = append(p.raw, c)
	newForm := p.form == ToolParserMistral && !p.inList
	var res scanResult
	if newForm && p.sc.st == sValue && !isSpace(c) && c != '{' && c != '[' {
		res = scanError // the newer form's arguments are an object or an array
	} else if res = p.sc.push(c, p); newForm && res == scanMore && p.sc.st == sAfter {
		res = scanDone // the arguments' closing bracket ends the call
	}
	switch res {
	case scanMore:
	case scanDone:
		p.sc.flush(p)
		if !p.sc.started {
			if !p.sc.haveName {
				p.fallback(false)
				return
			}
			p.sc.begin(p)
			p.emitArgs(p.sc.call, "{}")
		}
		p.calls++
		p.raw = p.raw[:0]
		p.match = 0
		switch p.form {
		case ToolParserHermes:
			p.st = dClose
		case ToolParserMistral:
			p.st = dListNext
			if newForm {
				p.st = dNext
			}
		default:
			p.st = dNext
		}
	case scanError:
		p.sc.flush(p)
		if p.sc.started {
			p.calls++
			p.st = dDone
			return
		}
		p.fallback(true)
	}
}

// scanResult is what a byte did to a call scanner.
type scanResult uint8

const (
	scanMore scanResult = iota
	scanDone
	scanError
)

// scanner states.
type scanState uint8

const (
	sObject   scanState = iota // before "{"
	sKeyOrEnd                  // a key or "}"
	sKey                       // in a key
	sKeyEsc                    // after a backslash in a key
	sColon                     // before ":"
	sValue                     // before a value
	sName                      // in the name's string
	sNameEsc                   // after a backslash in the name
	sNest                      // in a container value, outside strings
	sStr                       // in a string of a value
	sStrEsc                    // after a backslash in a string of a value
	sScalar                    // in a number or literal
	sAfter                     // after a value: "," or "}"
)

// callScanner scans one call object, {"name": "...", "arguments": VALUE, ...}, byte by byte.
type callScanner struct {
	call     int
	argsKeys []string
	st       scanState
	key      []byte
	name     []byte // the name's JSON string, quotes included
	haveName bool
	nameStr  string
	inArgs   bool   // scanning the arguments value
	argsSeen bool   // the arguments value has begun
	depth    int    // of the value's containers
	held     []byte // arguments text not emitted yet (before the call began, or within one feed)
	started  bool
}

// begin reports the call's start.
func (sc *callScanner) begin(p *formParser) {
	sc.started = true
	p.out = append(p.out, toolEvent{kind: evCallStart, call: sc.call, name: sc.nameStr})
}

// flush emits the arguments text held, once the call has begun.
func (sc *callScanner) flush(p *formParser) {
	if sc.started && len(sc.held) > 0 {
		p.emitArgs(sc.call, string(sc.held))
		sc.held = sc.held[:0]
	}
}

// valueByte adds c to the value being scanned (the arguments' text, when it is theirs).
func (sc *callScanner) valueByte(c byte) {
	if sc.inArgs {
		sc.held = append(sc.held, c)
	}
}

// endValue ends the value being scanned.
func (sc *callScanner) endValue(p *formParser) {
	if sc.inArgs {
		sc.inArgs = false
		if !sc.started && sc.haveName {
			sc.begin(p)
		}
	}
	sc.st = sAfter
}

func (sc *callScanner) push(c byte, p *formParser) scanResult {
	switch sc.st {
	case sObject:
		if c != '{' {
			return scanError
		}
		sc.st = sKeyOrEnd
	case sKeyOrEnd:
		switch {
		case isSpace(c):
		case c == '"':
			sc.key = sc.key[:0]
			sc.st = sKey
		case c == '}':
			return scanDone
		default:
			return scanError
		}
	case sKey:
		switch c {
		case '\\':
			sc.st = sKeyEsc
		case '"':
			sc.st = sColon
			return scanMore
		}
		sc.key = append(sc.key, c)
	case sKeyEsc:
		sc.key = append(sc.key, c)
		sc.st = sKey
	case sColon:
		switch {
		case isSpace(c):
		case c == ':':
			sc.st = sValue
		default:
			return scanError
		}
	case sValue:
		if isSpace(c) {
			return scanMore
		}
		key := string(sc.key)
		if key == "name" && !sc.haveName {
			if c != '"' {
				return scanError
			}
			sc.name = append(sc.name[:0], c)
			sc.st = sName
			return scanMore
		}
		sc.inArgs = !sc.argsSeen && sc.isArgsKey(key)
		if sc.inArgs {
			sc.argsSeen = true
			if sc.haveName {
				sc.begin(p)
			}
		}
		sc.valueByte(c)
		switch c {
		case '{', '[':
			sc.depth = 1
			sc.st = sNest
		case '"':
			sc.depth = 0
			sc.st = sStr
		case '}', ']', ',', ':':
			return scanError
		default:
			sc.st = sScalar
		}
	case sName:
		sc.name = append(sc.name, c)
		switch c {
		case '\\':
			sc.st = sNameEsc
		case '"':
			if err := json.Unmarshal(sc.name, &sc.nameStr); err != nil || sc.nameStr == "" {
				return scanError
			}
			sc.haveName = true
			sc.st = sAfter
			if sc.argsSeen && !sc.inArgs && !sc.started { // the arguments came first: the call begins now
				sc.begin(p)
			}
		}
	case sNameEsc:
		sc.name = append(sc.name, c)
		sc.st = sName
	case sNest:
		sc.valueByte(c)
		switch c {
		case '"':
			sc.st = sStr
		case '{', '[':
			sc.depth++
		case '}', ']':
			sc.depth--
			if sc.depth == 0 {
				sc.endValue(p)
			}
		}
	case sStr:
		sc.valueByte(c)
		switch c {
		case '\\':
			sc.st = sStrEsc
		case '"':
			if sc.depth == 0 {
				sc.endValue(p)
			} else {
				sc.st = sNest
			}
		}
	case sStrEsc:
		sc.valueByte(c)
		sc.st = sStr
	case sScalar:
		if isSpace(c) || c == ',' || c == '}' {
			sc.endValue(p)
			return sc.push(c, p)
		}
		sc.valueByte(c)
	case sAfter:
		switch {
		case isSpace(c):
		case c == ',':
			sc.st = sKeyOrEnd
		case c == '}':
			return scanDone
		default:
			return scanError
		}
	}
	return scanMore
}

// isArgsKey reports whether key names the call's arguments.
func (sc *callScanner) isArgsKey(key string) bool {
	for _, k := range sc.argsKeys {
		if key == k {
			return true
		}
	}
	return false
}
