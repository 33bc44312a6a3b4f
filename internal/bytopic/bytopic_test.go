package bytopic

import "testing"

func TestIndex(t *testing.T) {
	type entry struct {
		name  string
		parts []int
	}
	var list []entry
	idx := map[string]int{}
	mk := func(n string) entry { return entry{name: n} }
	for i, n := range []string{"a", "b", "a", "c", "b"} {
		j := Index(idx, &list, n, mk)
		list[j].parts = append(list[j].parts, i)
	}
	if len(list) != 3 || list[0].name != "a" || len(list[0].parts) != 2 || list[1].parts[1] != 4 || list[2].name != "c" {
		t.Fatalf("grouped %+v", list)
	}
}
