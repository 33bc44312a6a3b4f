//go:build !race

package netio_test

// raceEnabled: the race detector's runtime allocates on its own, so
// allocation bounds allow for it.
const raceEnabled = false
