// Package keyhash maps record keys to partitions the way Kafka's default
// partitioner does (murmur2 of the key bytes, made positive, modulo the
// partition count), so the native protocol, the Go SDK and Kafka clients
// (Java, franz-go, librdkafka's murmur2 mode) all send a key to the same
// partition.
package keyhash

import "encoding/binary"

// Murmur2 is MurmurHash2 (32-bit) with Kafka's seed, reading the input as
// little-endian 4-byte words as Kafka's Java implementation does.
func Murmur2(data []byte) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	h := uint32(seed) ^ uint32(len(data))
	for len(data) >= 4 {
		k := binary.LittleEndian.Uint32(data)
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		data = data[4:]
	}
	switch len(data) {
	case 3:
		h ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// Partition returns the partition of key among n partitions (n > 0).
func Partition(key []byte, n int32) int32 {
	return int32((Murmur2(key) & 0x7fffffff) % uint32(n))
}
