package tiered

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// Layout names a partition's objects:
//
//	<prefix><topic>-<topic id>/<partition>/<base offset, 20 digits>-<segment id>.log
//	                                   ... .rix  (the segment's Index)
//
// The topic id keeps a re-created topic of the same name apart; the
// segment id (random, one per copy attempt) keeps a retried copy from
// overwriting the objects of one that may still be listed.
type Layout struct {
	// Prefix starts every key (--remote-storage-prefix).
	Prefix string
}

// SegmentKeys are the two objects of one copied segment.
type SegmentKeys struct {
	Log, Index string
}

// Keys returns the objects of segment id of a partition.
func (l Layout) Keys(topic string, topicID [16]byte, partition int32, base int64, id string) SegmentKeys {
	stem := fmt.Sprintf("%s%s-%s/%d/%020d-%s", l.Prefix, topic, hex.EncodeToString(topicID[:]), partition, base, id)
	return SegmentKeys{Log: stem + ".log", Index: stem + ".rix"}
}

// NewSegmentID returns a fresh random segment id (32 hex digits).
func NewSegmentID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// validSegmentID reports whether id is what NewSegmentID makes.
func validSegmentID(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}
