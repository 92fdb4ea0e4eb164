package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"

	"golang.org/x/text/width"
)

// cells is how many terminal columns s takes: East Asian wide and fullwidth
// runes (小明, 烟花) take two, combining marks and zero-width joiners none,
// everything else one. Ambiguous-width runes (×, …) count as one, as in most
// non-CJK-locale terminals.
func cells(s string) int {
	n := 0
	for _, r := range s {
		n += runeCells(r)
	}
	return n
}

func runeCells(r rune) int {
	switch {
	case r == '\u200b' || r == '\u200d' || r == '\ufeff' || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Me, r):
		return 0
	case unicode.IsControl(r):
		return 0
	}
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
}

// fit pads s with spaces to exactly w cells, cutting it with "…" if it is
// wider. A wide rune that would straddle the edge is replaced by padding.
func fit(s string, w int) string {
	if n := cells(s); n <= w {
		return s + strings.Repeat(" ", w-n)
	}
	var b strings.Builder
	used := 0
	for _, r := range s {
		c := runeCells(r)
		if used+c > w-1 {
			break
		}
		b.WriteRune(r)
		used += c
	}
	b.WriteString("…")
	used++
	return b.String() + strings.Repeat(" ", w-used)
}

// style wraps text in ANSI SGR codes when colour is on.
type style struct{ on bool }

func (s style) wrap(code, text string) string {
	if !s.on || text == "" {
		return text
	}
	return "\x1b[" + code + "m" + text + "\x1b[0m"
}
func (s style) dim(t string) string    { return s.wrap("2", t) }
func (s style) bold(t string) string   { return s.wrap("1", t) }
func (s style) green(t string) string  { return s.wrap("32", t) }
func (s style) yellow(t string) string { return s.wrap("33", t) }
func (s style) red(t string) string    { return s.wrap("31", t) }
func (s style) cyan(t string) string   { return s.wrap("36", t) }

// useColor decides -color auto|always|never: auto colours a terminal unless
// NO_COLOR is set (https://no-color.org).
func useColor(mode string, f *os.File) (bool, error) {
	switch mode {
	case "always":
		return true, nil
	case "never":
		return false, nil
	case "auto":
		if os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
			return false, nil
		}
		fi, err := f.Stat()
		return err == nil && fi.Mode()&os.ModeCharDevice != 0, nil
	}
	return false, fmt.Errorf("-color must be auto, always or never, got %q", mode)
}

// board prints the two columns, one event per line, in arrival order. It is
// safe for concurrent use (the clicker and the subscriber both print).
type board struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
	left  int // width of the left column, in cells
	st    style
}

const timeCol = 8 // "+ 12.34s"

func (b *board) header() {
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintf(b.out, "%s │ %s │ %s\n", fit("time", timeCol),
		b.st.bold(fit("without merging", b.left)), b.st.bold("merged feed"))
	fmt.Fprintf(b.out, "%s─┼─%s─┼─%s\n", strings.Repeat("─", timeCol), strings.Repeat("─", b.left), strings.Repeat("─", 44))
}

func (b *board) stamp(at time.Time) string {
	return fmt.Sprintf("+%6.2fs", at.Sub(b.start).Seconds())
}

// click prints one row of the left column.
func (b *board) click(at time.Time, text, note string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	line := b.st.dim(b.stamp(at)) + " │ " + fit(text, b.left) + " │"
	if note != "" {
		line += " " + b.st.yellow(note)
	}
	fmt.Fprintln(b.out, line)
}

// merged prints one row of the right column.
func (b *board) merged(at time.Time, text, detail string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintln(b.out, b.st.dim(b.stamp(at))+" │ "+strings.Repeat(" ", b.left)+" │ "+b.st.green(text)+"  "+b.st.dim(detail))
}

// note prints a narration line; it may run across both columns.
func (b *board) note(at time.Time, text string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintln(b.out, b.st.dim(b.stamp(at))+" │ "+b.st.cyan("» "+text))
}

// plain prints a line as is.
func (b *board) plain(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintf(b.out, format+"\n", args...)
}
