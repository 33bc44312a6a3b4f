// Package tiered owns the parts of tiered storage (KIP-405) that do not
// need the engine: the object store and its S3 client (Store, S3), where
// a partition's objects live (Layout), the index object uploaded with
// each segment (Index), the per-partition record of what the store holds
// (Manifest), and the bounded cache of segment chunks that remote reads
// go through (Cache). The engine's uploader and remote reads
// (engine/remote.go) put them together.
package tiered
