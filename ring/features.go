package ring

import (
	"strconv"
	"strings"
)

// IORING_FEAT_* bits as reported by io_uring_setup (see Probe).
const (
	featSingleMmap = 1 << iota
	featNodrop
	featSubmitStable
	featRWCurPos
	featCurPersonality
	featFastPoll
	featPoll32Bits
	featSQPollNonfixed
	featExtArg
	featNativeWorkers
	featRsrcTags
	featCQESkip
	featLinkedFile
	featRegRegRing
	featRecvsendBundle
	featMinTimeout
	featRWAttr
	featNoIOWait
)

var featNames = [...]string{
	"SINGLE_MMAP", "NODROP", "SUBMIT_STABLE", "RW_CUR_POS", "CUR_PERSONALITY",
	"FAST_POLL", "POLL_32BITS", "SQPOLL_NONFIXED", "EXT_ARG", "NATIVE_WORKERS",
	"RSRC_TAGS", "CQE_SKIP", "LINKED_FILE", "REG_REG_RING", "RECVSEND_BUNDLE",
	"MIN_TIMEOUT", "RW_ATTR", "NO_IOWAIT",
}

// FeatureNames spells out IORING_FEAT_* bits for logging, for example
// "SINGLE_MMAP|NODROP|bit31"; bits it does not know by name are "bitN".
func FeatureNames(features uint32) string {
	var sb strings.Builder
	for i := 0; i < 32; i++ {
		if features&(1<<i) == 0 {
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('|')
		}
		if i < len(featNames) {
			sb.WriteString(featNames[i])
		} else {
			sb.WriteString("bit" + strconv.Itoa(i))
		}
	}
	return sb.String()
}
