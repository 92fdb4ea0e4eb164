package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	blue   = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	orange = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	red    = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	grey   = color.RGBA{R: 120, G: 120, B: 120, A: 255}
)

// render writes a two-panel PNG: push lag against offered load on top,
// achieved against offered throughput below, sharing the x axis so a knee
// in one lines up with the other.
func render(path, title string, pts []point, p99Target, maxTarget float64) error {
	lag := plot.New()
	lag.Title.Text = title
	lag.Y.Label.Text = "push lag, ms (receive - (first report + W + grace))"
	lag.X.Label.Text = "offered new windows/s"
	lag.Legend.Top = true
	lag.Legend.Left = true
	lag.Add(plotter.NewGrid())
	for _, s := range []struct {
		name string
		c    color.Color
		y    func(point) float64
	}{
		{"p50", blue, func(p point) float64 { return p.LagP50 }},
		{"p99", orange, func(p point) float64 { return p.LagP99 }},
		{"max", red, func(p point) float64 { return p.LagMax }},
	} {
		if err := addSeries(lag, s.name, s.c, pts, s.y, false); err != nil {
			return err
		}
	}
	// The measured values next to the p99 and max points: on a scale that
	// must also show the targets, small lags are hard to read off the axis.
	for _, s := range []struct {
		c  color.Color
		y  func(point) float64
		dy vg.Length
	}{
		{orange, func(p point) float64 { return p.LagP99 }, -vg.Points(14)},
		{red, func(p point) float64 { return p.LagMax }, vg.Points(4)},
	} {
		if err := addValueLabels(lag, s.c, pts, s.y, s.dy); err != nil {
			return err
		}
	}
	for _, t := range []struct {
		name string
		ms   float64
		c    color.Color
	}{{"p99 target", p99Target, orange}, {"max target", maxTarget, red}} {
		if t.ms > 0 {
			if err := addTarget(lag, fmt.Sprintf("%s %.0f ms", t.name, t.ms), t.c, pts, t.ms); err != nil {
				return err
			}
		}
	}
	lag.Y.Min = 0
	// Leave room above the highest target or sample for the legend, so
	// neither the target lines nor the data run under it.
	top := max(p99Target, maxTarget)
	for _, p := range pts {
		top = max(top, p.LagMax)
	}
	lag.Y.Max = 1.4 * top
	lag.Y.Tick.Marker = stepTicks{step: niceStep(lag.Y.Max)}

	tp := plot.New()
	tp.Y.Label.Text = "windows/s"
	tp.X.Label.Text = "offered new windows/s (median of runs; missing windows in legend)"
	tp.Legend.Top = true
	tp.Legend.Left = true
	tp.Add(plotter.NewGrid())
	if err := addSeries(tp, "achieved "+missingNote(pts), blue, pts, func(p point) float64 { return p.Throughput }, false); err != nil {
		return err
	}
	if err := addSeries(tp, "offered (ideal)", grey, pts, func(p point) float64 { return p.Offered }, true); err != nil {
		return err
	}
	tp.Y.Min = 0
	tp.Y.Max = 0
	for _, p := range pts {
		tp.Y.Max = max(tp.Y.Max, p.Offered, p.Throughput)
	}
	tp.Y.Max *= 1.15
	tp.Y.Tick.Marker = stepTicks{step: niceStep(tp.Y.Max)}

	img := vgimg.New(vg.Points(720), vg.Points(760))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 6 * vg.Millimeter,
		PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(14)}
	plots := [][]*plot.Plot{{lag}, {tp}}
	canvases := plot.Align(plots, tiles, dc)
	lag.Draw(canvases[0][0])
	tp.Draw(canvases[1][0])

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func addSeries(p *plot.Plot, name string, c color.Color, pts []point, y func(point) float64, dashed bool) error {
	xy := make(plotter.XYs, len(pts))
	for i, pt := range pts {
		xy[i] = plotter.XY{X: pt.Offered, Y: y(pt)}
	}
	line, points, err := plotter.NewLinePoints(xy)
	if err != nil {
		return err
	}
	line.Color, line.Width = c, vg.Points(2)
	points.Color, points.Shape = c, draw.CircleGlyph{}
	if dashed {
		line.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		points.Radius = 0
	}
	p.Add(line, points)
	p.Legend.Add(name, line, points)
	return nil
}

func addTarget(p *plot.Plot, name string, c color.Color, pts []point, ms float64) error {
	xy := plotter.XYs{{X: pts[0].Offered, Y: ms}, {X: pts[len(pts)-1].Offered, Y: ms}}
	l, err := plotter.NewLine(xy)
	if err != nil {
		return err
	}
	l.Color, l.Width = c, vg.Points(1)
	l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

func missingNote(pts []point) string {
	var miss int64
	for _, p := range pts {
		miss += p.Missing
	}
	return fmt.Sprintf("(windows missing: %d)", miss)
}

// addValueLabels writes each point's value (rounded) beside it, dy above.
func addValueLabels(p *plot.Plot, c color.Color, pts []point, y func(point) float64, dy vg.Length) error {
	l := plotter.XYLabels{XYs: make(plotter.XYs, len(pts)), Labels: make([]string, len(pts))}
	for i, pt := range pts {
		l.XYs[i] = plotter.XY{X: pt.Offered, Y: y(pt)}
		l.Labels[i] = fmt.Sprintf("%.0f", y(pt))
		if y(pt) < 10 {
			l.Labels[i] = fmt.Sprintf("%.1f", y(pt))
		}
	}
	labels, err := plotter.NewLabels(l)
	if err != nil {
		return err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].Color = c
	}
	labels.Offset = vg.Point{X: vg.Points(5), Y: dy}
	p.Add(labels)
	return nil
}

// stepTicks marks the axis every step (labelled, as integers) and every
// step/5 (unlabelled): gonum's default ticker labels too few values here.
type stepTicks struct{ step float64 }

func (t stepTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	minor := t.step / 5
	for i := math.Ceil(lo / minor); i*minor <= hi; i++ {
		v := i * minor
		label := ""
		if math.Mod(i, 5) == 0 {
			label = strconv.FormatFloat(v, 'f', -1, 64)
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: label})
	}
	return ticks
}

// niceStep is a 1, 2 or 5 times a power of ten giving 4 to 10 labelled
// ticks up to hi.
func niceStep(hi float64) float64 {
	if hi <= 0 {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(hi)))
	for _, m := range []float64{0.1, 0.2, 0.5, 1, 2, 5} {
		if hi/(m*mag) <= 10 {
			return m * mag
		}
	}
	return 10 * mag
}
