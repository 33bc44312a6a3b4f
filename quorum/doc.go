// Package quorum runs one node of the metadata quorum: hashicorp/raft
// (v1.7.3), founded by the --voters set and changed one voter at a time
// since (AddVoter, RemoveVoter), replicating the records of package
// metadata into its FSM. The Raft leader is the cluster's controller.
//
// A node whose id is not a voter is a broker-only node: a Raft non-voter.
// It is not bootstrapped; it asks the voters to take it in (a join
// request in the handshake, see stream.go), the leader adds it with
// AddNonvoter (or moves it to its new address after a restart), and from
// then on it receives the log and snapshots like a follower, never
// votes, campaigns or proposes until AddVoter promotes it. Why a non-voter rather than fetching the
// committed log over the Kafka protocol, as KRaft brokers do: Raft
// already replicates, snapshots and catches up a lagging member, and the
// node gets the same FSM, WaitIndex and subscriptions as a voter, so
// cluster mode runs unchanged on it. The cost: the leader pushes to it (a
// listener the voters must reach), and it stays in the Raft
// configuration once stopped.
//
// # A node's directory
//
//	<Config.Dir>/
//	  cluster.json   {"version":1,"cluster_id":"…","node_id":N}: whose data this is
//	  raft.db        raft-boltdb/v2 (bbolt): the Raft log and stable state (term, vote)
//	  snapshots/     raft.FileSnapshotStore: the image as JSON (metadata.EncodeImage), 2 kept
//
// cluster.json is written before any Raft data; it also records the
// founding voters. Open refuses a directory of another node, a directory
// of another cluster (when Config.ClusterID is given), Raft data without
// cluster.json, and a directory first started with other voters than
// Config.Voters ("every node keeps the --voters the cluster was founded
// with").
//
// # An empty directory
//
// A founding voter whose directory is empty asks the other founding
// voters before it bootstraps (findCluster): if the cluster runs, it
// joins like a broker-only node instead and takes no Raft connection
// until the leader admitted it, and the leader admits it only if it never
// registered, or after RemoveVoter took it out: a voter that lost its log
// must not vote while the others still count it.
//
// # Cluster id
//
// Format (the `ringlog cluster format` step) records a chosen cluster id;
// it is optional. The first leader of a new cluster commits InitCluster
// with its recorded id, or a random one. Every node records the committed
// id in cluster.json before applying the next entry, and stops itself
// (Err, Done) if its directory names another id.
//
// # Transport and handshake
//
// Raft runs over a NetworkTransport whose StreamLayer dials through
// Config.Dial (tests route links through proxies) and handshakes every
// connection before Raft's bytes (format in stream.go): both sides send
// their node id, cluster id (if known) and canonical voters, and drop the
// connection if the voters differ, the cluster ids differ, or the dialed
// address belongs to another node. Nodes of different clusters therefore
// never exchange a Raft message, which could otherwise truncate one
// cluster's log with another's. Refusals are logged once per peer and
// reported by PeerMismatch.
//
// # Proposing and reading
//
// Propose runs on the leader only: elsewhere it returns a *NotLeaderError
// naming the leader (id and Raft address), for the caller to forward. Its
// result is the FSM's: a committed record can still be refused
// (*metadata.RefusedError, identical on every node). ErrUncertain means the
// outcome is unknown (leadership lost, shutdown, ctx ended while in
// flight); re-proposing is safe for records whose preconditions turn a
// duplicate into a refusal or a no-op.
//
// Image returns the local image (possibly behind the leader's);
// ConsistentImage, on the leader, includes every record committed before
// the call (a Barrier); WaitIndex(i) waits for a given write on any node.
//
// # Timing
//
// Defaults are close to hashicorp's (heartbeat and election 1 s, lease
// 500 ms, commit 50 ms); tests use 300 ms. SnapshotThreshold and
// TrailingLogs default to 1024, well below raft's, because a bbolt file
// never shrinks and metadata snapshots are small. hashicorp's hclog output
// goes to Config.Logger (slog), warnings and up by default.
package quorum
