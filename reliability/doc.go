// Package reliability holds the broker's long-running reliability
// scenarios: overload (producers far faster than the disk, checked
// against a memory bound derived from the flags) and connection storms
// (thousands of idle and slowloris connections next to a normal client).
// They drive a real broker process (./slowbroker: the broker `ringlog
// serve` runs, with a disk slowed through the test-only file-layer seam)
// and print one "RESULT scenario | figure | pass|FAIL" line each, which
// run.sh (`make reliability`) gathers into a table. Environment variables
// scale them: `make test` runs short versions, `make reliability` and
// `make overload` the long ones.
package reliability
