// Package metadata is the replicated cluster metadata of a ringlog
// cluster: the image (what the cluster looks like), the records that change
// it (KIP-631 style commands, kept in a Raft log), the deterministic Apply
// that checks their preconditions, replica placement, and the FSM that
// hashicorp/raft drives. The Raft node itself is package quorum; nothing
// here does I/O except reading and writing snapshots through Raft.
//
// # What is replicated
//
// An Image holds, at one Raft log index:
//
//   - the cluster id (set once by InitCluster);
//   - brokers: id, incarnation id, broker epoch (the log index of its
//     registration), Kafka and controller endpoints, named listeners,
//     rack, fenced flag;
//   - topics: name, id, internal flag, config overrides, and per partition
//     the replicas, ISR, leader, leader epoch and partition epoch;
//   - cluster-wide broker config defaults;
//   - the next producer id (blocks are handed out by AllocateProducerIDs);
//   - the last controller to take office, and its Raft term (TakeOffice);
//   - SCRAM credentials (salt, iterations, StoredKey, ServerKey per user
//     and mechanism: never a password) and ACL bindings, which every
//     broker authenticates and authorizes from (cluster.Security).
//
// Images are immutable. Apply copies what a record changes (copy-on-write:
// the touched maps and topics) and shares the rest, so readers hold an
// image without locks and Diff skips unchanged topics by pointer.
//
// # Records and their preconditions
//
// Apply refuses a record whose preconditions fail with a *RefusedError
// that unwraps to a Kafka error; the image then stays as it was (but for
// its index). Refusals depend only on the image and the record, so every
// node refuses the same records with the same text:
//
//	InitCluster          id is 1-64 of [A-Za-z0-9._-]; a different id than the set one: INCONSISTENT_CLUSTER_ID
//	RegisterBroker       id ≥ 0, non-zero incarnation, host:port endpoints, listeners named [A-Z0-9_]{1,64}
//	                     once each (at most 16): else INVALID_REGISTRATION;
//	                     an identical registration is a no-op; otherwise a new epoch (= log index), fenced
//	Fence/UnfenceBroker  registered (BROKER_ID_NOT_REGISTERED), epoch current (STALE_BROKER_EPOCH)
//	CreateTopic          valid name (INVALID_TOPIC_EXCEPTION), new (TOPIC_ALREADY_EXISTS), no '.'/'_'/case
//	                     collision (INVALID_TOPIC_EXCEPTION), unused non-zero id (INVALID_REQUEST),
//	                     1..MaxPartitions partitions (INVALID_PARTITIONS), 1 ≤ RF ≤ live brokers
//	                     (INVALID_REPLICATION_FACTOR), every replica list RF long, distinct, registered
//	                     and unfenced (INVALID_REPLICA_ASSIGNMENT)
//	DeleteTopic          exists (UNKNOWN_TOPIC_OR_PARTITION); the id, if given, matches (UNKNOWN_TOPIC_ID)
//	CreatePartitions     as DeleteTopic; at least one new partition (INVALID_PARTITIONS); the new lists
//	                     as for CreateTopic with the topic's RF
//	ChangePartition      topic id known (UNKNOWN_TOPIC_ID), partition exists (UNKNOWN_TOPIC_OR_PARTITION);
//	                     requester registered with its epoch (STALE_BROKER_EPOCH) and leading
//	                     (NOT_LEADER_OR_FOLLOWER); leader epoch older: FENCED_LEADER_EPOCH, newer:
//	                     UNKNOWN_LEADER_EPOCH; partition epoch ≠ expected: INVALID_UPDATE_VERSION;
//	                     new leader a replica (INVALID_REQUEST) and unfenced (INELIGIBLE_REPLICA); ISR a
//	                     duplicate-free subset of the replicas containing the leader (INVALID_REQUEST);
//	                     joining members unfenced, members' epochs as given (INELIGIBLE_REPLICA, KIP-903)
//	AlterConfigs         topic exists (UNKNOWN_TOPIC_OR_PARTITION); broker resource only with an empty
//	                     name (cluster default); keys 1-255 bytes (INVALID_CONFIG), not repeated
//	                     (INVALID_REQUEST). Values are the proposer's to validate.
//	AllocateProducerIDs  broker registered with its epoch (STALE_BROKER_EPOCH); 1..MaxProducerIDBlock ids
//	UpsertScramCredential  non-empty user, salt (≤ 1 KiB) and iterations ≥ 1, keys the hash's size
//	                     (UNACCEPTABLE_CREDENTIAL); mechanism 1 or 2 (UNSUPPORTED_SASL_MECHANISM)
//	DeleteScramCredential the user has that mechanism (RESOURCE_NOT_FOUND)
//	CreateACLs           concrete enums and non-empty strings (INVALID_REQUEST); present ones are skipped
//	DeleteACLs           none: absent bindings are skipped (the proposer resolves filters to bindings)
//	TakeOffice           controller ≥ 0, term ≥ 1 (INVALID_REQUEST), term above the last one
//	                     (STALE_CONTROLLER_EPOCH)
//	InOffice             the last TakeOffice is this controller's in this term (NOT_CONTROLLER); changes nothing
//	ReassignPartition    topic id known (UNKNOWN_TOPIC_ID), partition exists (UNKNOWN_TOPIC_OR_PARTITION);
//	                     a target: 1..MaxReplicas distinct registered brokers (INVALID_REPLICA_ASSIGNMENT);
//	                     no target (cancel): a reassignment in progress (NO_REASSIGNMENT_IN_PROGRESS);
//	                     the ISR left after dropping the replicas no longer assigned is not empty and
//	                     has an unfenced member if the leader leaves (INVALID_REPLICA_ASSIGNMENT);
//	                     target brokers may be fenced (the move then waits for them)
//	UnregisterBroker     registered (BROKER_ID_NOT_REGISTERED) with that epoch (STALE_BROKER_EPOCH), fenced and a
//	                     replica of no partition (INVALID_REQUEST)
//	SetRemoteLog         topic id known (UNKNOWN_TOPIC_ID), partition exists (UNKNOWN_TOPIC_OR_PARTITION);
//	                     requester registered with that epoch and the leader (BROKER_ID_NOT_REGISTERED,
//	                     STALE_BROKER_EPOCH, NOT_LEADER_OR_FOLLOWER); the partition's leader epoch
//	                     (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH); version = RemoteLogVersion + 1
//	                     (INVALID_UPDATE_VERSION), or the current version with the same manifest (a
//	                     no-op); manifest at most MaxRemoteLog bytes (INVALID_REQUEST); no epoch changes
//	Batch                every record, in order, atomically; batches do not nest
//
// A ReassignPartition, and any ChangePartition of a partition being
// reassigned, completes the reassignment when every target replica is in
// the ISR (see ReassignPartition).
//
// Epochs: a leader change (including to NoLeader) bumps the leader epoch
// and the partition epoch; an ISR change alone bumps the partition epoch;
// a ChangePartition that changes nothing is a no-op. Fencing a broker does
// not touch partitions: the controller moves leadership and ISR
// membership away in the same Batch, so no image shows a fenced leader.
//
// # Record encoding
//
// Every Raft log entry holds one record:
//
//	+---------+------+------------------+
//	| version | kind | body             |
//	| u8 = 1  | u8   | fields, in order |
//	+---------+------+------------------+
//
//	uv    unsigned LEB128 varint         sv    zigzag varint (int32 fields range-checked)
//	str   uv length, UTF-8 bytes         uuid  16 bytes
//	bool  one byte, 0 or 1               list  uv count, elements
//	map   uv count, (str key, str value) in strictly increasing key order
//	opt   bool present, then the fields if present
//
//	1  InitCluster          str clusterID
//	2  RegisterBroker       sv id, uuid incarnation, str kafkaAddr, str controllerAddr, str rack
//	3  FenceBroker          sv id, sv epoch
//	4  UnfenceBroker        sv id, sv epoch
//	5  CreateTopic          str name, uuid id, bool internal, list of (list of sv) replicas, map configs
//	6  DeleteTopic          str name, uuid id
//	7  CreatePartitions     str name, uuid id, list of (list of sv) replicas
//	8  ChangePartition      uuid topicID, sv partition, sv expectedPartitionEpoch, opt(sv leaderEpoch),
//	                        opt(sv requester, sv requesterEpoch), opt(sv leader), list of sv isr,
//	                        list of sv isrEpochs
//	9  AlterConfigs         u8 resourceType, str name, list of (str key, bool delete, str value)
//	10 AllocateProducerIDs  sv broker, sv brokerEpoch, sv count
//	11 Batch                list of (u8 kind, body)
//	12 RegisterBroker       kind 2's fields, then list of (str name, str addr) listeners, at least one
//	13 UpsertScramCredential str user, u8 mechanism, sv iterations, bytes salt, bytes storedKey, bytes serverKey
//	14 DeleteScramCredential str user, u8 mechanism
//	15 CreateACLs           list of acl
//	16 DeleteACLs           list of acl
//	17 TakeOffice           sv controller, uv term
//	18 InOffice             sv controller, uv term
//	19 ReassignPartition    uuid topicID, sv partition, bool hasTarget, (list of sv target if hasTarget)
//	20 UnregisterBroker     sv id, sv epoch
//	21 SetRemoteLog         uuid topicID, sv partition, sv requester, sv requesterEpoch, sv leaderEpoch,
//	                        sv version, bytes manifest
//
//	bytes uv length, bytes
//	acl   u8 resourceType, str name, u8 patternType, str principal, str host, u8 operation, u8 permission
//	      (Kafka's enum numbers)
//
// The encoding is deterministic, and DecodeRecord accepts nothing else:
// trailing bytes, non-0/1 booleans, unordered or repeated map keys,
// non-UTF-8 strings and unknown versions or kinds are errors, and it never
// panics (FuzzDecodeRecord). EncodeRecord decodes what it produced, so a
// record that reaches the log decodes on every node of the same version.
//
// # Snapshots
//
// A Raft snapshot is the whole image as one JSON object (EncodeImage):
//
//	{"version":1, "index":N, "cluster_id":"…", "next_producer_id":N,
//	 "brokers":[{"id","incarnation","epoch","kafka_addr","controller_addr","rack","fenced"}…],
//	 "topics":[{"name","id","internal","partitions":[{"replicas","isr","leader",
//	            "leader_epoch","partition_epoch"}…],"configs":{…}}…],
//	 "broker_configs":{…},
//	 "scram":[{"user","mechanism","iterations","salt","stored_key","server_key"}…],
//	 "acls":[{"resource_type","resource_name","pattern_type","principal","host","operation","permission"}…]}
//
// Brokers carry "listeners":[{"name","addr"}…] when registered with them;
// credentials are sorted by user and mechanism, byte strings base64, and
// ACLs kept sorted and unique.
//
// Brokers are sorted by id, topics by name, map keys sorted, empty fields
// omitted: the encoding is a function of the content, and Image.Hash (the
// SHA-256 of it without the index) is equal on nodes that applied the same
// log, whether record by record or from a snapshot. DecodeImage refuses
// unknown fields and versions and checks the invariants Apply keeps
// (FuzzDecodeImage).
//
// # The seam for the publisher
//
// A broker acts on metadata (opens logs, becomes leader or follower of a
// partition on its shard) in a publisher goroutine, never on Raft's FSM
// goroutine:
//
//	Raft FSM goroutine                         readers (Metadata, admin)
//	  Apply(entry) ─► img.Apply ─► new *Image ─► FSM.Image() (atomic load)
//	                                  │
//	                                  └─ wake (cap-1 channel, coalescing)
//	                                       │
//	publisher goroutine ◄──────────────────┘
//	  sub := fsm.Subscribe(); last := NewImage()
//	  for range sub.C() { img := fsm.Image(); d := Diff(last, img); act(d); last = img }
//
// The FSM never blocks on a subscriber and a subscriber never misses a
// change: a wake-up means "the image moved", and Diff(last, current)
// lists what moved since the last handled image, including a jump by a
// snapshot restore. Delta.Partitions with RoleOf tell a broker which
// partitions it now leads or follows; Delta.DeletedTopics which logs to
// close (never delete data because metadata is missing: rename them).
// Image.Index is the last applied index, and FSM.WaitIndex(i) waits for a
// given write (read-your-writes after forwarding a proposal).
package metadata
