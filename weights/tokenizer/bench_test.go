package tokenizer

import (
	"os"
	"strings"
	"testing"
)

// benchTextPath is ~1 MB of mixed text written by testdata/oracle/gen_strings.mjs --bench (the
// setup script does it); testdata/oracle/oracle.mjs --bench times HuggingFace on the same file.
const benchTextPath = "testdata/npm/generated/bench.txt"

// BenchmarkEncode measures single-threaded encode throughput (b.SetBytes: MB/s) of each real
// tokenizer on the benchmark text, after one warm-up encode as the oracle's timing does.
func BenchmarkEncode(b *testing.B) {
	needTestdata(b, benchTextPath)
	data, err := os.ReadFile(benchTextPath)
	if err != nil {
		b.Fatal(err)
	}
	text := string(data)
	for _, name := range tokenizerNames {
		b.Run(name, func(b *testing.B) {
			tok := loadTestTokenizer(b, name)
			tok.Encode(text, false)
			b.SetBytes(int64(len(text)))
			b.ResetTimer()
			for b.Loop() {
				tok.Encode(text, false)
			}
		})
	}
}

// BenchmarkEncodeLines encodes the same text line by line (prompt-sized inputs), as the oracle's
// "lines" timing does with a single-threaded batch.
func BenchmarkEncodeLines(b *testing.B) {
	needTestdata(b, benchTextPath)
	data, err := os.ReadFile(benchTextPath)
	if err != nil {
		b.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	for _, name := range tokenizerNames {
		b.Run(name, func(b *testing.B) {
			tok := loadTestTokenizer(b, name)
			for _, line := range lines {
				tok.Encode(line, false)
			}
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for b.Loop() {
				for _, line := range lines {
					tok.Encode(line, false)
				}
			}
		})
	}
}

// BenchmarkDecode measures Decode of the benchmark text's ids.
func BenchmarkDecode(b *testing.B) {
	needTestdata(b, benchTextPath)
	data, err := os.ReadFile(benchTextPath)
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range tokenizerNames {
		b.Run(name, func(b *testing.B) {
			tok := loadTestTokenizer(b, name)
			ids := tok.Encode(string(data), false)
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for b.Loop() {
				tok.Decode(ids, false)
			}
		})
	}
}

// BenchmarkLoad measures parsing a tokenizer.json.
func BenchmarkLoad(b *testing.B) {
	for _, name := range tokenizerNames {
		b.Run(name, func(b *testing.B) {
			needTestdata(b, tokenizerFiles[name])
			data, err := os.ReadFile(tokenizerFiles[name])
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := Parse(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
