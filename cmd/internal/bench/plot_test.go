package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

// svgStats parses an SVG fully (failing the test on malformed XML) and counts its elements by name;
// it also checks that every numeric coordinate attribute is a finite number.
func svgStats(t *testing.T, data []byte) map[string]int {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	counts := map[string]int{}
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("malformed XML: %v\n%s", err, data)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if depth == 0 && (el.Name.Local != "svg" || el.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element %v, want svg in the SVG namespace", el.Name)
			}
			depth++
			counts[el.Name.Local]++
			for _, a := range el.Attr {
				switch a.Name.Local {
				case "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "width", "height":
					if v, err := strconv.ParseFloat(a.Value, 64); err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
						t.Errorf("<%s %s=%q>: not a finite number", el.Name.Local, a.Name.Local, a.Value)
					}
				}
			}
		case xml.EndElement:
			depth--
		}
	}
	if depth != 0 || counts["svg"] != 1 {
		t.Fatalf("unbalanced document (depth %d, %d svg elements)", depth, counts["svg"])
	}
	return counts
}

func sweepResults(batches ...int) []*LatencyResult {
	var rs []*LatencyResult
	for _, b := range batches {
		step := 10 + float64(b)/4
		rs = append(rs, &LatencyResult{
			Batch:                 b,
			DecodeStep:            Summary{P50: step, P90: step * 1.1},
			DecodeTokensPerSecond: float64(b) / step * 1e3,
			Roofline:              RooflineReport{StepMS: 8 + float64(b)/8, TokensPerSecond: float64(b) / (8 + float64(b)/8) * 1e3},
		})
	}
	return rs
}

func TestWriteLatencySVG(t *testing.T) {
	for _, tc := range []struct {
		name    string
		results []*LatencyResult
	}{
		{"sweep", sweepResults(8, 1, 2, 4, 64)}, // unsorted on purpose
		{"one batch", sweepResults(16)},
		{"zeros", []*LatencyResult{{Batch: 1}, {Batch: 2}}}, // nothing measured: still a valid figure
		{"NaN", []*LatencyResult{{Batch: 1, DecodeStep: Summary{P50: math.NaN()}, DecodeTokensPerSecond: math.Inf(1)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteLatencySVG(&buf, `llama <3> & "friends"`, tc.results); err != nil {
				t.Fatal(err)
			}
			counts := svgStats(t, buf.Bytes())
			// Two panels, each a measured and a roofline line; a dot per measured point per panel.
			if counts["polyline"] != 4 || counts["circle"] != 2*len(tc.results) || counts["g"] != 2 {
				t.Errorf("counts %v", counts)
			}
			if !strings.Contains(buf.String(), "llama &lt;3&gt; &amp; &#34;friends&#34;") {
				t.Errorf("title not escaped:\n%s", buf.String())
			}
		})
	}
	if err := WriteLatencySVG(io.Discard, "x", nil); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("no results: err %v", err)
	}
}

// TestPlotScales checks the axes: batch sizes land left to right in order on a log2 scale, and the
// y axis starts at 0 and covers the largest value.
func TestPlotScales(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteLatencySVG(&buf, "t", sweepResults(1, 4, 16)); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&buf)
	var xs []float64 // the first panel's measured points
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if el, ok := tok.(xml.StartElement); ok && el.Name.Local == "circle" && len(xs) < 3 {
			for _, a := range el.Attr {
				if a.Name.Local == "cx" {
					v, _ := strconv.ParseFloat(a.Value, 64)
					xs = append(xs, v)
				}
			}
		}
	}
	if len(xs) != 3 || !(xs[0] < xs[1] && xs[1] < xs[2]) || math.Abs((xs[1]-xs[0])-(xs[2]-xs[1])) > 0.02 {
		t.Errorf("batch positions %v: want increasing and evenly spaced (1, 4, 16 on log2)", xs)
	}
	for _, tc := range []struct{ v, top, step float64 }{
		{0.9, 1, 0.2}, {7, 8, 2}, {10, 10, 2}, {123, 150, 50}, {3150, 4000, 1000}, {2400, 2500, 500}, {0, 1, 0.2},
	} {
		top, step := niceAxis(tc.v)
		if math.Abs(top-tc.top) > 1e-9 || math.Abs(step-tc.step) > 1e-9 || top < tc.v {
			t.Errorf("niceAxis(%v) = %v, %v; want %v, %v", tc.v, top, step, tc.top, tc.step)
		}
	}
}
