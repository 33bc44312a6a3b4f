package perf

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Series is one line of a chart.
type Series struct {
	// Name is the legend entry; X and Y the points (same length).
	Name string
	X, Y []float64
}

// Chart describes a line chart.
type Chart struct {
	// Title and the axis labels.
	Title, XLabel, YLabel string
	// LogX and LogY put an axis on a log scale (values must be > 0).
	LogX, LogY bool
	// XTicks, when set, are the only ticks of the X axis (e.g. the
	// partition counts of a sweep).
	XTicks []float64
	// Series are the lines, each drawn with points.
	Series []Series
}

// Save draws the chart with gonum/plot to path; the extension (.svg,
// .png, .pdf) picks the format.
func (c Chart) Save(path string) error {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	if c.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if c.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if len(c.XTicks) > 0 {
		ticks := make(plot.ConstantTicks, len(c.XTicks))
		for i, x := range c.XTicks {
			ticks[i] = plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'g', -1, 64)}
		}
		p.X.Tick.Marker = ticks
	}
	var args []any
	points := 0
	for _, s := range c.Series {
		xys := make(plotter.XYs, 0, len(s.X))
		for i := range s.X {
			x, y := s.X[i], s.Y[i]
			if (c.LogX && x <= 0) || (c.LogY && y <= 0) || math.IsNaN(y) || math.IsInf(y, 0) {
				continue
			}
			xys = append(xys, plotter.XY{X: x, Y: y})
		}
		if len(xys) == 0 {
			continue
		}
		sort.Slice(xys, func(i, j int) bool { return xys[i].X < xys[j].X })
		args = append(args, s.Name, xys)
		points += len(xys)
	}
	if points == 0 {
		return fmt.Errorf("chart %q: no data to draw", c.Title)
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	// Headroom above the data for the legend (top left).
	if c.LogY {
		// Keep at least one decade visible so the log ticks show.
		if p.Y.Max/p.Y.Min < 10 {
			p.Y.Min = math.Pow(10, math.Floor(math.Log10(p.Y.Min)))
			p.Y.Max = math.Pow(10, math.Floor(math.Log10(p.Y.Max))+1)
		}
		p.Y.Max *= 4
	} else {
		p.Y.Min = 0
		p.Y.Max *= 1.3
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
