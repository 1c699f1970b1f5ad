package benchstat

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// palette colours the series of a chart, in order.
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
	{0xbc, 0xbd, 0x22, 0xff}, {0x17, 0xbe, 0xcf, 0xff}, {0x00, 0x00, 0x00, 0xff}, {0x9e, 0xda, 0xe5, 0xff},
	{0xff, 0xbb, 0x78, 0xff}, {0x98, 0xdf, 0x8a, 0xff},
}

// Chart draws the latency distributions of series as cumulative curves
// (fraction of samples at or below a latency, latency on a log scale) and
// writes a PNG: one look shows medians, tails and the distance from the
// baselines.
func Chart(w io.Writer, title string, series []*Series) error {
	const (
		width, height            = 1400, 720
		left, right, top, bottom = 80, 560, 50, 60
	)
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	var lo, hi time.Duration = math.MaxInt64, 0
	var drawn []*Series
	for _, s := range series {
		if len(s.Samples) == 0 {
			continue
		}
		drawn = append(drawn, s)
		for _, d := range s.Samples {
			lo, hi = min(lo, max(d, time.Microsecond)), max(hi, d)
		}
	}
	if len(drawn) == 0 {
		return fmt.Errorf("chart: no samples")
	}
	// Decades of milliseconds that cover the samples.
	lmin := math.Floor(math.Log10(float64(lo) / 1e6))
	lmax := math.Ceil(math.Log10(float64(hi) / 1e6))
	if lmax <= lmin {
		lmax = lmin + 1
	}
	pw, ph := width-left-right, height-top-bottom
	xOf := func(d time.Duration) int {
		v := math.Log10(math.Max(float64(d), 1e3) / 1e6)
		return left + int((v-lmin)/(lmax-lmin)*float64(pw))
	}
	yOf := func(f float64) int { return top + ph - int(f*float64(ph)) }
	grey := color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	black := color.RGBA{0, 0, 0, 0xff}
	// Grid and axis labels.
	for e := lmin; e <= lmax; e++ {
		x := left + int((e-lmin)/(lmax-lmin)*float64(pw))
		vline(img, x, top, top+ph, grey)
		label(img, x-12, top+ph+18, msLabel(math.Pow(10, e)), black)
		if e < lmax {
			for k := 2; k < 10; k++ {
				xx := left + int((e+math.Log10(float64(k))-lmin)/(lmax-lmin)*float64(pw))
				vline(img, xx, top+ph-4, top+ph, black)
			}
		}
	}
	for _, f := range []float64{0, 0.5, 0.9, 0.99} {
		y := yOf(f)
		hline(img, left, left+pw, y, grey)
		label(img, 20, y+4, fmt.Sprintf("p%g", f*100), black)
	}
	hline(img, left, left+pw, top+ph, black)
	vline(img, left, top, top+ph, black)
	label(img, left, 30, title, black)
	label(img, left+pw/2-60, height-20, "latency (ms, log scale)", black)
	// Curves and legend.
	for i, s := range drawn {
		c := palette[i%len(palette)]
		d := slices.Clone(s.Samples)
		slices.Sort(d)
		px, py := xOf(d[0]), yOf(0)
		for j, v := range d {
			x, y := xOf(v), yOf(float64(j+1)/float64(len(d)))
			line(img, px, py, x, py, c) // step: horizontal, then vertical
			line(img, x, py, x, y, c)
			px, py = x, y
		}
		ly := top + 10 + i*22
		for t := 0; t < 3; t++ {
			hline(img, width-right+20, width-right+50, ly+t-1, c)
		}
		// The 7x13 face has ASCII only.
		name := strings.ReplaceAll(s.Name, "→", "->")
		label(img, width-right+58, ly+4, fmt.Sprintf("%s (p50 %.2f ms)", trim(name, 56), ms(s.Quantile(0.5))), black)
	}
	return png.Encode(w, img)
}

func trim(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func msLabel(v float64) string {
	if v < 1 {
		return fmt.Sprintf("%g", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func label(img *image.RGBA, x, y int, s string, c color.Color) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		img.SetRGBA(x, y, c)
	}
}

// line draws a horizontal or vertical segment, two pixels wide.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	if y0 == y1 {
		hline(img, min(x0, x1), max(x0, x1), y0, c)
		hline(img, min(x0, x1), max(x0, x1), y0-1, c)
		return
	}
	vline(img, x0, min(y0, y1), max(y0, y1), c)
	vline(img, x0+1, min(y0, y1), max(y0, y1), c)
}
