package main

// ringlog recover-metadata: rebuild a stopped broker's ringlog-meta.json
// from its backup copy and the partition directories (engine.RecoverMetadata).

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/cli"
)

const recoverMetadataUsage = `
Usage: ringlog recover-metadata --data-dir DIR [--dry-run]

Rebuilds the topic registry of a stopped broker's data directory
(ringlog-meta.json) when it was lost or damaged: ringlog serve then
refuses to start and names this command, rather than take the partition
logs for strays. It starts from ringlog-meta.json if intact, else from
its backup copy ringlog-meta.backup.json (rewritten after every change),
and adds every partition directory (<topic>-<n>) the file does not list:
such a topic keeps its records but gets a new topic id and the broker's
default configs. It also takes back logs a start set aside as
<topic>-<n>.orphan-stray, once you rename them back to <topic>-<n>.
Nothing is deleted. The next start checks every log as after a crash.
`

const recoverMetadataExamples = `
Examples:
  ringlog recover-metadata --data-dir ./data --dry-run   # what it would write
  ringlog recover-metadata --data-dir ./data

Exit status: 0 rebuilt (or, with --dry-run, would be), 1 failed (the broker
still holds the directory, or a file cannot be written), 2 usage.
`

func runRecoverMetadata(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("recover-metadata", recoverMetadataUsage, recoverMetadataExamples, stdout)
	dir := fs.String("data-dir", "", "the broker's data directory (required)")
	dryRun := fs.Bool("dry-run", false, "print what would be written, write nothing")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return cli.Usagef("recover-metadata: --data-dir is required")
	}
	rep, err := engine.RecoverMetadata(*dir, *dryRun)
	if err != nil {
		return fmt.Errorf("recover-metadata: %w", err)
	}
	base := rep.Base
	if base == "" {
		base = "nothing (no intact metadata file or backup)"
	}
	fmt.Fprintf(stdout, "rebuilt from %s and the partition directories of %s\n\n", base, *dir)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tLOGS HERE\tFROM")
	for _, t := range rep.Topics {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", t.Name, t.Partitions, t.Logs, t.Source)
	}
	tw.Flush()
	for _, w := range rep.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	if rep.Written {
		fmt.Fprintf(stdout, "\nwrote %s/ringlog-meta.json; start the broker again\n", *dir)
	} else {
		fmt.Fprintln(stdout, "\ndry run: nothing written")
	}
	return nil
}
