package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/gollm/gollm/engine/constraint"
)

// constraintFlags are gollm generate's structured-output flags: one of them constrains the output
// (engine/constraint), through the engine's masked picks as the server's requests are.
type constraintFlags struct {
	jsonSchema, grammar, regex string
	choice                     []string
}

func (c *constraintFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.jsonSchema, "json-schema", "", "constrain the output to JSON valid under the JSON Schema in this file")
	fs.StringVar(&c.grammar, "grammar", "", "constrain the output to the GBNF grammar (llama.cpp's) in this file")
	fs.StringVar(&c.regex, "regex", "", "constrain the output to match this regular expression (ECMAScript syntax)")
	fs.StringArrayVar(&c.choice, "choice", nil, "constrain the output to one of these strings (repeatable)")
}

// byteSource is a vocabulary of the 256 bytes: enough to check a constraint compiles before the
// model's own vocabulary is there.
type byteSource struct{}

func (byteSource) TokenBytes(id int32) ([]byte, bool) { return []byte{byte(id)}, id >= 0 && id < 256 }

// spec returns the constraint the flags ask for (nil: none). It fails, before any model loads, when
// more than one is given, a file cannot be read, or the constraint does not compile (its error names
// what it refuses; it is compiled against a vocabulary of bytes, which every tokenizer's tokens spell).
func (c *constraintFlags) spec(fs *pflag.FlagSet) (*constraint.Spec, error) {
	var specs []constraint.Spec
	var names []string
	for _, f := range []struct {
		name string
		kind constraint.Kind
		file bool
	}{{"json-schema", constraint.JSONSchema, true}, {"grammar", constraint.GBNF, true}, {"regex", constraint.Regex, false},
		{"choice", constraint.Choice, false}} {
		if !fs.Changed(f.name) {
			continue
		}
		names = append(names, "--"+f.name)
		spec := constraint.Spec{Kind: f.kind}
		switch {
		case f.kind == constraint.Choice:
			spec.Choices = c.choice
		case f.kind == constraint.Regex:
			spec.Text = c.regex
		case f.file:
			path := c.jsonSchema
			if f.kind == constraint.GBNF {
				path = c.grammar
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("--%s: %w", f.name, err)
			}
			spec.Text = string(data)
		}
		specs = append(specs, spec)
	}
	switch len(specs) {
	case 0:
		return nil, nil
	case 1:
	default:
		return nil, fmt.Errorf("%s each constrain the output: give one of them", strings.Join(names, " and "))
	}
	vocab, err := constraint.NewVocabulary(byteSource{}, 256)
	if err != nil {
		return nil, err
	}
	if _, err := constraint.Compile(specs[0], vocab, constraint.Options{}); err != nil {
		return nil, fmt.Errorf("%s: %w", names[0], err)
	}
	return &specs[0], nil
}
