// Package bytopic builds the per-topic lists of Kafka requests and
// responses (a topic's entry, then its partitions under it) from flat
// per-partition items: the one helper the request builders and the
// answer builders of netio, peerwire and the CLI share.
package bytopic

// Index returns the position in *list of the entry for key, appending
// mk(key) the first time key is seen (index remembers the positions).
func Index[K comparable, T any](index map[K]int, list *[]T, key K, mk func(K) T) int {
	if i, ok := index[key]; ok {
		return i
	}
	*list = append(*list, mk(key))
	index[key] = len(*list) - 1
	return index[key]
}
