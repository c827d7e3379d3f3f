package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// Every request field the server reads is declared, with its JSON name, in the request types of its
// endpoint (completionRequest, chatRequest, tokenizeRequest, detokenizeRequest, and the types of their
// nested objects): those declarations are each endpoint's allow-list. A field outside it is refused
// with a 400 that names it, never ignored: a client asking for something gollm does not do (beam
// search, functions, a content part it cannot read, ...) learns so instead of getting an answer made
// without it. Fields declared but implemented only for some values (structured_outputs'
// whitespace_pattern, guided_decoding_backend other than "auto", a tool of a type other than
// function) are refused by name where they are read.

// unsupportedParameter is the 400 for a request field the server does not implement, named by its
// path in the body (messages[0].tool_calls).
func unsupportedParameter(path string) *apiError {
	e := badRequest(path, "Unsupported parameter: '%s' is not supported by this server.", path)
	e.Code = strPtr("unsupported_parameter")
	return e
}

// unknownField returns the path of the first field of the JSON value body (keys in sorted order,
// depth first) that type t does not declare, or "" when it declares them all. A declared field whose
// type is a struct, a pointer to one or a slice of them is checked inside; fields of other types
// (json.RawMessage, maps, numbers, strings) are leaves. Keys match declared names exactly, not
// case-insensitively as encoding/json's decoding does.
func unknownField(body []byte, t reflect.Type) string {
	return unknownIn(bytes.TrimSpace(body), t, "")
}

func unknownIn(raw []byte, t reflect.Type, path string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if t == reflect.TypeFor[json.RawMessage]() {
			return ""
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return "" // not an object (null, or a type error decodeBody reports)
		}
		fields := fieldsOf(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			name := k
			if path != "" {
				name = path + "." + k
			}
			ft, ok := fields[k]
			if !ok {
				return name
			}
			if f := unknownIn(obj[k], ft, name); f != "" {
				return f
			}
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return ""
		}
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return ""
		}
		for i, item := range items {
			if f := unknownIn(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); f != "" {
				return f
			}
		}
	}
	return ""
}

// declaredFields caches fieldsOf.
var declaredFields sync.Map // reflect.Type → map[string]reflect.Type

// fieldsOf returns the JSON names of t's fields (those of embedded structs included) and their types.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if m, ok := declaredFields.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range fieldsOf(ft) {
					if _, dup := m[k]; !dup {
						m[k] = v
					}
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	declaredFields.Store(t, m)
	return m
}
