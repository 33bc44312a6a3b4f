//go:build race

package batch

// raceEnabled: under the race detector sync.Pool drops what it is given
// at random, so pooled decoders are rebuilt and allocation counts mean
// nothing.
const raceEnabled = true
