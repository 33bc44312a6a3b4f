package perf

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Series is one set of points of a chart.
type Series struct {
	// Name is the legend entry; X and Y the points (same length).
	Name string
	X, Y []float64
	// PointsOnly draws markers without a joining line: for a point that
	// is not part of a sweep (e.g. a lone large-topic run), where a line
	// would suggest measurements between it and its neighbours.
	PointsOnly bool
}

// Chart describes a chart of measured points.
type Chart struct {
	// Title and the axis labels (the unit belongs in YLabel, once).
	Title, XLabel, YLabel string
	// LogY puts the Y axis on a log scale (values must be > 0).
	LogY bool
	// Categories, when set, makes the X axis categorical: exactly these
	// measured X values, evenly spaced in increasing order, each with its
	// own tick and nothing in between, so that a sweep over 1..64 and a
	// point at 1000 neither squeeze together nor need a log scale. Points
	// whose X is not a category are dropped.
	Categories []float64
	// Series are drawn with markers; unless PointsOnly, a series' points
	// are joined by a line.
	Series []Series
}

// Chart canvas size.
const (
	chartWidth  = 8 * vg.Inch
	chartHeight = 5 * vg.Inch
	chartMargin = 12 * vg.Millimeter / 2
)

// Save draws the chart with gonum/plot to path; the extension (.svg,
// .png, .pdf) picks the format.
func (c Chart) Save(path string) error {
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	cw, err := draw.NewFormattedCanvas(chartWidth, chartHeight, format)
	if err != nil {
		return fmt.Errorf("chart %q: %w", c.Title, err)
	}
	if err := c.draw(cw); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart %q: %w", c.Title, err)
	}
	if _, err := cw.WriteTo(f); err != nil {
		_ = f.Close() // failing already: the error returned says more
		return fmt.Errorf("chart %q: writing %s: %w", c.Title, path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("chart %q: writing %s: %w", c.Title, path, err)
	}
	return nil
}

// draw lays the chart out on a chartWidth × chartHeight canvas: the plot
// on the left, the legend in a column of its own on the right, below the
// title, so that no legend entry sits on the data, the grid or the tick
// labels.
func (c Chart) draw(canvas vg.CanvasSizer) error {
	p, legend, err := c.plot()
	if err != nil {
		return err
	}
	// gonum lays text out to the canvas' very edge with its own font
	// metrics; a viewer substituting a wider font (DejaVu for Liberation)
	// would cut it off. A blank margin all round keeps it whole.
	dc := draw.Crop(draw.New(canvas), chartMargin, -chartMargin, chartMargin, -chartMargin)
	r := legend.Rectangle(dc)
	// A fifth more than gonum measures: a viewer may substitute a wider
	// font (DejaVu for Liberation), and the column must still hold it.
	lw := (r.Max.X - r.Min.X) * 6 / 5
	const gap = 10 * vg.Millimeter / 2
	plotArea := draw.Crop(dc, 0, -(lw + gap), 0, 0)
	// The title is centred over the plot and never wrapped by gonum: a
	// long one is cut off at both edges, so wrap it here, to 3/4 of the
	// plot's width by gonum's metrics (a substituted font is up to a
	// third wider).
	p.Title.Text = wrapText(c.Title, func(s string) vg.Length { return p.Title.TextStyle.Width(s) }, plotArea.Size().X*3/4)
	p.Draw(plotArea)
	titleH := p.Title.TextStyle.Height(p.Title.Text) + p.Title.Padding
	legend.Draw(draw.Crop(dc, dc.Size().X-lw, 0, 0, -titleH))
	return nil
}

// plot builds the gonum plot of the chart and its legend (drawn apart
// from the plot: draw).
func (c Chart) plot() (*plot.Plot, plot.Legend, error) {
	p := plot.New()
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.Add(plotter.NewGrid())
	legend := plot.NewLegend()
	legend.Top = true
	legend.Left = true
	legend.Padding = legend.TextStyle.Font.Size / 3 // entries apart, not touching
	cats := append([]float64(nil), c.Categories...)
	sort.Float64s(cats)
	index := map[float64]int{}
	for i, x := range cats {
		index[x] = i
	}
	if c.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
	} else {
		p.Y.Tick.Marker = plainTicks{}
	}
	points := 0
	for si, s := range c.Series {
		xys := make(plotter.XYs, 0, len(s.X))
		for i := range s.X {
			x, y := s.X[i], s.Y[i]
			if (c.LogY && y <= 0) || math.IsNaN(y) || math.IsInf(y, 0) || math.IsNaN(x) || math.IsInf(x, 0) {
				continue
			}
			if len(cats) > 0 {
				ci, ok := index[x]
				if !ok {
					continue
				}
				x = float64(ci)
			}
			xys = append(xys, plotter.XY{X: x, Y: y})
		}
		if len(xys) == 0 {
			continue
		}
		sort.Slice(xys, func(i, j int) bool { return xys[i].X < xys[j].X })
		points += len(xys)
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return nil, legend, fmt.Errorf("chart %q: %w", c.Title, err)
		}
		sc.GlyphStyle.Color = plotutil.Color(si)
		sc.GlyphStyle.Shape = plotutil.Shape(si)
		sc.GlyphStyle.Radius = vg.Points(3)
		if s.PointsOnly || len(xys) == 1 {
			p.Add(sc)
			legend.Add(s.Name, sc)
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, legend, fmt.Errorf("chart %q: %w", c.Title, err)
		}
		l.LineStyle.Color = plotutil.Color(si)
		l.LineStyle.Dashes = plotutil.Dashes(si)
		p.Add(l, sc)
		legend.Add(s.Name, l, sc)
	}
	if points == 0 {
		return nil, legend, fmt.Errorf("chart %q: no data to draw", c.Title)
	}
	if len(cats) > 0 {
		ticks := make(plot.ConstantTicks, len(cats))
		for i, x := range cats {
			ticks[i] = plot.Tick{Value: float64(i), Label: strconv.FormatFloat(x, 'g', -1, 64)}
		}
		p.X.Tick.Marker = ticks
		// Half a slot of room on either side: the first and last tick
		// labels stay inside the canvas, the markers off the frame.
		p.X.Min, p.X.Max = -0.5, float64(len(cats))-0.5
	} else {
		p.X.Tick.Marker = plainTicks{}
		// Room for the markers and the last tick label.
		pad := (p.X.Max - p.X.Min) * 0.05
		if pad == 0 { // one point: a tenth of its value either side
			pad = math.Max(math.Abs(p.X.Max)*0.1, 1)
		}
		p.X.Min, p.X.Max = p.X.Min-pad, p.X.Max+pad
	}
	if c.LogY {
		// Whole decades, so that every power of ten in range gets its
		// label (0.01, 0.1, 1 ms...) and sub-millisecond values can be
		// read, and at least one decade.
		p.Y.Min = math.Pow(10, math.Floor(math.Log10(p.Y.Min)))
		p.Y.Max = math.Pow(10, math.Max(math.Ceil(math.Log10(p.Y.Max)), math.Log10(p.Y.Min)+1))
	} else {
		p.Y.Min = 0
		if p.Y.Max <= 0 {
			p.Y.Max = 1
		}
		p.Y.Max *= 1.08 // the top marker clear of the frame
	}
	return p, legend, nil
}

// wrapText breaks s at spaces into lines no wider than max by width,
// keeping the line breaks s has.
func wrapText(s string, width func(string) vg.Length, max vg.Length) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(strings.ReplaceAll(s, "\n", " \n ")) {
		if w == "\n" {
			lines = append(lines, line)
			line = ""
			continue
		}
		if line != "" && width(line+" "+w) > max {
			lines = append(lines, line)
			line = w
			continue
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return strings.Join(append(lines, line), "\n")
}

// plainTicks are ticks a reader expects: 5 to 10 labelled ones at a
// round step (1, 2, 2.5 or 5 times a power of ten) with a minor tick
// between each two, labelled without trailing zeros ("500", not
// "500.00"), thousands as k and millions as M.
type plainTicks struct{}

// Ticks implements plot.Ticker.
func (plainTicks) Ticks(min, max float64) []plot.Tick {
	if !(max > min) {
		return []plot.Tick{{Value: min, Label: tickLabel(min, 0, math.Abs(min))}}
	}
	step := niceStep(max - min)
	if !(step > 0) || math.IsInf(step, 0) || (max-min)/step > 20 {
		// A span that under- or overflows: two plain ends.
		return []plot.Tick{{Value: min, Label: strconv.FormatFloat(min, 'g', 4, 64)}, {Value: max, Label: strconv.FormatFloat(max, 'g', 4, 64)}}
	}
	top := math.Max(math.Abs(min), math.Abs(max))
	var ts []plot.Tick
	first := math.Ceil(min/step) * step
	for i := 0; ; i++ {
		v := first + float64(i)*step
		if v > max+step*1e-9 {
			break
		}
		ts = append(ts, plot.Tick{Value: v, Label: tickLabel(v, step, top)})
		if minor := v + step/2; minor <= max {
			ts = append(ts, plot.Tick{Value: minor})
		}
	}
	if minor := first - step/2; minor >= min {
		ts = append(ts, plot.Tick{Value: minor})
	}
	return ts
}

// logTicks label every power of ten in range (0.01, 0.1, 1, 10, 100,
// 1000, 10k...) with minor ticks at 2..9 times each. gonum's LogTicks
// truncates the first decade toward zero and so leaves every decade
// below 1 unlabelled.
type logTicks struct{}

// Ticks implements plot.Ticker.
func (logTicks) Ticks(lowest, highest float64) []plot.Tick {
	if !(lowest > 0) || !(highest >= lowest) || math.IsInf(highest, 0) {
		return nil
	}
	lo := int(math.Floor(math.Log10(lowest) + 1e-9))
	hi := int(math.Ceil(math.Log10(highest) - 1e-9))
	var ts []plot.Tick
	for e := lo; e <= hi; e++ {
		v := math.Pow10(e)
		label := strconv.FormatFloat(v, 'f', max(-e, 0), 64)
		if e >= 4 {
			label = tickLabel(v, v, v)
		}
		if v >= lowest*(1-1e-9) && v <= highest*(1+1e-9) {
			ts = append(ts, plot.Tick{Value: v, Label: label})
		}
		for i := 2; i < 10 && e < hi; i++ {
			if m := v * float64(i); m >= lowest && m <= highest {
				ts = append(ts, plot.Tick{Value: m})
			}
		}
	}
	return ts
}

// niceStep is the round step (1, 2, 2.5 or 5 times a power of ten) that
// cuts span into 5 to 10 parts.
func niceStep(span float64) float64 {
	raw := span / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{2, 2.5, 5} {
		if m*mag <= raw {
			step = m * mag
		}
	}
	return step
}

// tickLabel formats v for an axis whose major ticks are step apart and
// whose largest magnitude is top.
func tickLabel(v, step, top float64) string {
	div, suffix := 1.0, ""
	switch {
	case top >= 1e6:
		div, suffix = 1e6, "M"
	case top >= 1e4:
		div, suffix = 1e3, "k"
	}
	v, step = v/div, step/div
	// As many decimals as the step needs (0.25 apart: 2), no more.
	dec := 0
	for step > 0 && dec < 6 {
		scaled := step * math.Pow10(dec)
		if math.Abs(scaled-math.Round(scaled)) < 1e-9*math.Max(1, scaled) {
			break
		}
		dec++
	}
	if math.Abs(v) < step/2 {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', dec, 64) + suffix
}
