package bench

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"os"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// WriteCSV writes memcpy results with a header line.
func WriteCSV(w io.Writer, machine string, rs []Result) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"machine", "path", "dir", "bytes", "iters", "gbps", "backend_gbps"})
	for _, r := range rs {
		_ = cw.Write([]string{machine, r.Path, r.Dir, strconv.FormatUint(r.Size, 10), strconv.Itoa(r.Iters),
			strconv.FormatFloat(r.GBps, 'f', 3, 64), strconv.FormatFloat(r.BackendGBps, 'f', 3, 64)})
	}
	cw.Flush()
	return cw.Error()
}

// ReadCSV reads what WriteCSV wrote (to merge native and guest runs).
func ReadCSV(r io.Reader) ([]Result, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, err
	}
	var out []Result
	for i, row := range rows {
		if i == 0 || len(row) < 7 {
			continue
		}
		size, _ := strconv.ParseUint(row[3], 10, 64)
		iters, _ := strconv.Atoi(row[4])
		g, _ := strconv.ParseFloat(row[5], 64)
		b, _ := strconv.ParseFloat(row[6], 64)
		out = append(out, Result{Path: row[1], Dir: row[2], Size: size, Iters: iters, GBps: g, BackendGBps: b})
	}
	return out, nil
}

// WriteTable prints results as a table.
func WriteTable(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "%-18s %-4s %12s %10s %12s\n", "path", "dir", "bytes", "GB/s", "backend GB/s")
	for _, r := range rs {
		be := "-"
		if r.BackendGBps > 0 {
			be = fmt.Sprintf("%.2f", r.BackendGBps)
		}
		fmt.Fprintf(w, "%-18s %-4s %12d %10.2f %12s\n", r.Path, r.Dir, r.Size, r.GBps, be)
	}
}

// Plot draws bandwidth against size, one line per path and direction, to a PNG.
func Plot(path, title string, rs []Result) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "copy size (bytes, log2)"
	p.Y.Label.Text = "GB/s"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	series := map[string]plotter.XYs{}
	for _, r := range rs {
		k := r.Path + " " + r.Dir
		series[k] = append(series[k], plotter.XY{X: float64(r.Size), Y: r.GBps})
		if r.BackendGBps > 0 && (r.Path == "pinned" || r.Path == "pageable-auto") {
			k := r.Path + " " + r.Dir + " (backend side)"
			series[k] = append(series[k], plotter.XY{X: float64(r.Size), Y: r.BackendGBps})
		}
	}
	keys := make([]string, 0, len(series))
	for k := range series {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		l, pts, err := plotter.NewLinePoints(series[k])
		if err != nil {
			return err
		}
		c := plotutil.Color(i)
		l.Color, pts.Color = c, c
		if i >= 7 {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(k, l, pts)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Color = color.Black
	if err := p.Save(9*vg.Inch, 6*vg.Inch, path); err != nil {
		return fmt.Errorf("bench: plot %s: %w", path, err)
	}
	return nil
}

// Create opens a results file for writing.
func Create(path string) (*os.File, error) { return os.Create(path) }
