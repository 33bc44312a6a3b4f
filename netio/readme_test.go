package netio

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestREADMEListsServedAPIs keeps the README's API tables honest: every
// row of apiTable, of the transaction APIs (single node), and of the
// tables served with security on (SASL, credentials, ACLs), appears with the versions ApiVersions advertises,
// and the README lists nothing else.
func TestREADMEListsServedAPIs(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| (\w+) \| (\d+) \| (\d+)(?:–(\d+))? \|`)
	listed := map[int16][2]int16{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		key, _ := strconv.Atoi(m[2])
		lo, _ := strconv.Atoi(m[3])
		hi := lo
		if m[4] != "" {
			hi, _ = strconv.Atoi(m[4])
		}
		listed[int16(key)] = [2]int16{int16(lo), int16(hi)}
	}
	var served []apiHandler
	for _, tbl := range [][]apiHandler{apiTable, txnAPITable, shareAPITable, saslAPITable, credentialAPITable, aclAPITable, clusterAdminAPITable} {
		served = append(served, tbl...)
	}
	for _, h := range served {
		got, ok := listed[h.key]
		if !ok {
			t.Errorf("README does not list %s (key %d)", h.name, h.key)
			continue
		}
		if got != [2]int16{h.advMin, h.max} {
			t.Errorf("README lists %s as %d–%d, ApiVersions advertises %d–%d", h.name, got[0], got[1], h.advMin, h.max)
		}
		delete(listed, h.key)
	}
	for key := range listed {
		t.Errorf("README lists API key %d, which is not served", key)
	}
}
