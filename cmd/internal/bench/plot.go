package bench

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Plot geometry, in SVG user units: two panels side by side.
const (
	plotPanelW, plotPanelH   = 460, 340
	plotMarginL, plotMarginR = 70, 20
	plotMarginT, plotMarginB = 50, 50
	plotTitleH               = 30
)

// series is one line of a panel.
type series struct {
	name   string
	color  string
	dashed bool
	ys     []float64
	lo, hi []float64 // optional whiskers (p50 to p90, say); nil for none
}

// panel is one chart: y against batch size on a log2 axis.
type panel struct {
	title, yLabel string
	series        []series
}

// WriteLatencySVG draws the results of a batch sweep (RunLatencySweep) as an SVG: decode throughput
// and decode step time against batch size, each beside its roofline. title heads the figure.
func WriteLatencySVG(w io.Writer, title string, results []*LatencyResult) error {
	if len(results) == 0 {
		return fmt.Errorf("bench: plot: no results: %w", ErrInvalidOptions)
	}
	rs := slices.Clone(results)
	slices.SortFunc(rs, func(a, b *LatencyResult) int { return a.Batch - b.Batch })
	batches := make([]float64, len(rs))
	var tput, tputRoof, step, stepP90, stepRoof []float64
	for i, r := range rs {
		batches[i] = float64(r.Batch)
		tput = append(tput, r.DecodeTokensPerSecond)
		tputRoof = append(tputRoof, r.Roofline.TokensPerSecond)
		step = append(step, r.DecodeStep.P50)
		stepP90 = append(stepP90, r.DecodeStep.P90)
		stepRoof = append(stepRoof, r.Roofline.StepMS)
	}
	panels := []panel{
		{title: "decode throughput", yLabel: "tokens/s", series: []series{
			{name: "measured", color: "#1f77b4", ys: tput},
			{name: "roofline", color: "#d62728", dashed: true, ys: tputRoof},
		}},
		{title: "decode step time", yLabel: "ms per step (p50, whisker to p90)", series: []series{
			{name: "measured", color: "#1f77b4", ys: step, lo: step, hi: stepP90},
			{name: "roofline", color: "#d62728", dashed: true, ys: stepRoof},
		}},
	}
	width, height := 2*plotPanelW, plotPanelH+plotTitleH
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(bw, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(bw, `<text x="%d" y="20" text-anchor="middle" font-size="15">%s</text>`+"\n", width/2, xmlText(title))
	for i, p := range panels {
		drawPanel(bw, p, batches, float64(i*plotPanelW), plotTitleH)
	}
	fmt.Fprintln(bw, "</svg>")
	return bw.Flush()
}

// drawPanel draws p with its top-left corner at (x0, y0).
func drawPanel(w io.Writer, p panel, xs []float64, x0, y0 float64) {
	left, top := x0+plotMarginL, y0+plotMarginT
	plotW := float64(plotPanelW - plotMarginL - plotMarginR)
	plotH := float64(plotPanelH - plotMarginT - plotMarginB)
	lx0, lx1 := math.Log2(xs[0]), math.Log2(xs[len(xs)-1])
	const pad = 20 // keep the end points off the frame
	xAt := func(x float64) float64 {
		if lx1 == lx0 {
			return left + plotW/2
		}
		return left + pad + (plotW-2*pad)*(math.Log2(x)-lx0)/(lx1-lx0)
	}
	ymax := 0.0
	for _, s := range p.series {
		for i, y := range s.ys {
			ymax = math.Max(ymax, finite(y))
			if s.hi != nil {
				ymax = math.Max(ymax, finite(s.hi[i]))
			}
		}
	}
	ymax, step := niceAxis(ymax)
	yAt := func(y float64) float64 { return top + plotH*(1-finite(y)/ymax) }

	fmt.Fprintf(w, `<g>`+"\n")
	fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="middle" font-size="14">%s</text>`+"\n",
		num(left+plotW/2), num(y0+plotMarginT-22), xmlText(p.title))
	// Grid and y ticks.
	for y := 0.0; y <= ymax*(1+1e-9); y += step {
		py := yAt(y)
		fmt.Fprintf(w, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#ddd"/>`+"\n", num(left), num(py), num(left+plotW), num(py))
		fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n",
			num(left-6), num(py), xmlText(tickLabel(y)))
	}
	// X ticks at each batch size.
	for _, x := range xs {
		px := xAt(x)
		fmt.Fprintf(w, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#999"/>`+"\n", num(px), num(top+plotH), num(px), num(top+plotH+5))
		fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(px), num(top+plotH+18),
			strconv.FormatFloat(x, 'f', -1, 64))
	}
	fmt.Fprintf(w, `<rect x="%s" y="%s" width="%s" height="%s" fill="none" stroke="#333"/>`+"\n", num(left), num(top), num(plotW), num(plotH))
	fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="middle">batch size</text>`+"\n", num(left+plotW/2), num(top+plotH+38))
	fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="middle" transform="rotate(-90 %s %s)">%s</text>`+"\n",
		num(x0+16), num(top+plotH/2), num(x0+16), num(top+plotH/2), xmlText(p.yLabel))
	// Series, then the legend.
	for si, s := range p.series {
		var pts []string
		for i, y := range s.ys {
			pts = append(pts, num(xAt(xs[i]))+","+num(yAt(y)))
		}
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(w, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.color, dash)
		for i, y := range s.ys {
			if s.hi != nil {
				fmt.Fprintf(w, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"/>`+"\n",
					num(xAt(xs[i])), num(yAt(s.lo[i])), num(xAt(xs[i])), num(yAt(s.hi[i])), s.color)
			}
			if !s.dashed {
				fmt.Fprintf(w, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", num(xAt(xs[i])), num(yAt(y)), s.color)
			}
		}
		ly := top + 14 + float64(si)*16
		fmt.Fprintf(w, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"%s/>`+"\n",
			num(left+10), num(ly), num(left+34), num(ly), s.color, dash)
		fmt.Fprintf(w, `<text x="%s" y="%s" dominant-baseline="middle">%s</text>`+"\n", num(left+40), num(ly), xmlText(s.name))
	}
	fmt.Fprintf(w, "</g>\n")
}

// niceAxis returns an axis top at or above v and a tick step, both 1, 2 or 5 times a power of ten,
// with four to ten ticks.
func niceAxis(v float64) (top, step float64) {
	if !(v > 0) || math.IsInf(v, 0) {
		return 1, 0.2
	}
	raw := v / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step = 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	return math.Ceil(v/step-1e-9) * step, step
}

// tickLabel formats an axis value compactly (1200 → 1.2k).
func tickLabel(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 4, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 4, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// num formats a coordinate with two decimals.
func num(v float64) string { return strconv.FormatFloat(finite(v), 'f', 2, 64) }

// xmlText escapes s for an XML text node or attribute.
func xmlText(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
