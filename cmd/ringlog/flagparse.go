package main

// Flag parsing shared by every command: on a mistake the usage is printed
// once, followed by one error line that suggests the closest flag.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// parseFlags parses args with fs. --help prints the usage and returns
// errHelp; a bad flag prints the usage once and returns a usageError that
// names the flag and, when one is close, the flag that was probably meant.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	// The flag package prints its own error line and the usage on every
	// failure; silence both and print the usage once below.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if err == nil {
		return nil
	}
	usage()
	if errors.Is(err, flag.ErrHelp) {
		return errHelp
	}
	msg := strings.Replace(err.Error(), " -", " --", 1)
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		msg = "unknown flag --" + name
		if s := closestFlag(fs, name); s != "" {
			msg += " (did you mean --" + s + "?)"
		}
	}
	return usageError{fmt.Sprintf("%s: %s", fs.Name(), msg)}
}

// closestFlag is the flag of fs nearest to name by edit distance, if it
// is near enough to be a typo ("" otherwise).
func closestFlag(fs *flag.FlagSet, name string) string {
	name = strings.TrimLeft(name, "-")
	if i := strings.IndexByte(name, '='); i >= 0 {
		name = name[:i]
	}
	best, bestD := "", 0
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		if best == "" || d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best == "" || bestD > max(2, len(name)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
