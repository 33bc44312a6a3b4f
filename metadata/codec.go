package metadata

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"unicode/utf8"
)

// RecordVersion is the version byte every encoded record starts with.
const RecordVersion = 1

// ErrMalformed is wrapped by every DecodeRecord error.
var ErrMalformed = errors.New("metadata: malformed record")

// EncodeRecord encodes rec for the Raft log (the format is in the package
// documentation). The encoding is deterministic: equal records encode to
// equal bytes. It fails for a nil record, a nested Batch, or a string that
// is not UTF-8 — anything the decoder would refuse, so that every record
// that reaches the log decodes on every node.
func EncodeRecord(rec Record) ([]byte, error) {
	if rec == nil {
		return nil, errors.New("metadata: encode a nil record")
	}
	e := &encoder{b: make([]byte, 0, 64)}
	e.u8(RecordVersion)
	e.u8(uint8(rec.Kind()))
	encodeBody(e, rec)
	if _, err := DecodeRecord(e.b); err != nil {
		return nil, fmt.Errorf("metadata: %s cannot be encoded: %w", rec.Kind(), err)
	}
	return e.b, nil
}

// DecodeRecord decodes one encoded record. It never panics: malformed,
// truncated or trailing bytes, an unknown version or kind, non-canonical
// booleans or map order, and strings that are not UTF-8 are errors
// wrapping ErrMalformed.
func DecodeRecord(b []byte) (Record, error) {
	d := &decoder{b: b}
	v := d.u8()
	if d.err == nil && v != RecordVersion {
		return nil, fmt.Errorf("%w: version %d (this broker reads version %d)", ErrMalformed, v, RecordVersion)
	}
	kind := Kind(d.u8())
	if d.err != nil {
		return nil, d.err
	}
	rec := decodeBody(d, kind, true)
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes after %s", len(d.b), kind)
	}
	if d.err != nil {
		return nil, d.err
	}
	return rec, nil
}

func encodeBody(e *encoder, rec Record) {
	switch r := rec.(type) {
	case InitCluster:
		e.str(r.ClusterID)
	case RegisterBroker:
		e.varint(int64(r.ID))
		e.uuid(r.Incarnation)
		e.str(r.KafkaAddr)
		e.str(r.ControllerAddr)
		e.str(r.Rack)
		if len(r.Listeners) > 0 { // kind 12
			e.uvarint(uint64(len(r.Listeners)))
			for _, l := range r.Listeners {
				e.str(l.Name)
				e.str(l.Addr)
			}
		}
	case UpsertScramCredential:
		e.str(r.User)
		e.u8(uint8(r.Mechanism))
		e.varint(int64(r.Credential.Iterations))
		e.bytes(r.Credential.Salt)
		e.bytes(r.Credential.StoredKey)
		e.bytes(r.Credential.ServerKey)
	case DeleteScramCredential:
		e.str(r.User)
		e.u8(uint8(r.Mechanism))
	case CreateACLs:
		e.acls(r.ACLs)
	case DeleteACLs:
		e.acls(r.ACLs)
	case FenceBroker:
		e.varint(int64(r.ID))
		e.varint(r.Epoch)
	case UnfenceBroker:
		e.varint(int64(r.ID))
		e.varint(r.Epoch)
	case CreateTopic:
		e.str(r.Name)
		e.uuid(r.ID)
		e.bool(r.Internal)
		e.assignment(r.Replicas)
		e.strMap(r.Configs)
	case DeleteTopic:
		e.str(r.Name)
		e.uuid(r.ID)
	case CreatePartitions:
		e.str(r.Name)
		e.uuid(r.ID)
		e.assignment(r.Replicas)
	case ChangePartition:
		e.uuid(r.TopicID)
		e.varint(int64(r.Partition))
		e.varint(int64(r.ExpectedPartitionEpoch))
		e.optInt32(r.LeaderEpoch)
		e.bool(r.Requester != nil)
		if r.Requester != nil {
			e.varint(int64(r.Requester.ID))
			e.varint(r.Requester.Epoch)
		}
		e.optInt32(r.Leader)
		e.int32s(r.ISR)
		e.uvarint(uint64(len(r.ISREpochs)))
		for _, v := range r.ISREpochs {
			e.varint(v)
		}
	case AlterConfigs:
		e.u8(uint8(r.Type))
		e.str(r.Name)
		e.uvarint(uint64(len(r.Ops)))
		for _, op := range r.Ops {
			e.str(op.Key)
			e.bool(op.Delete)
			e.str(op.Value)
		}
	case AllocateProducerIDs:
		e.varint(int64(r.Broker))
		e.varint(r.BrokerEpoch)
		e.varint(int64(r.Count))
	case TakeOffice:
		e.varint(int64(r.Controller))
		e.uvarint(r.Term)
	case InOffice:
		e.varint(int64(r.Controller))
		e.uvarint(r.Term)
	case UnregisterBroker:
		e.varint(int64(r.ID))
		e.varint(r.Epoch)
	case SetRemoteLog:
		e.uuid(r.TopicID)
		e.varint(int64(r.Partition))
		e.varint(int64(r.Requester.ID))
		e.varint(r.Requester.Epoch)
		e.varint(int64(r.LeaderEpoch))
		e.varint(r.Version)
		e.bytes(r.Manifest)
	case ReassignPartition:
		e.uuid(r.TopicID)
		e.varint(int64(r.Partition))
		e.bool(r.Target != nil)
		if r.Target != nil {
			e.int32s(r.Target)
		}
	case Batch:
		e.uvarint(uint64(len(r.Records)))
		for _, sub := range r.Records {
			if sub == nil {
				e.u8(0) // an invalid kind: the verifying decode refuses it
				continue
			}
			e.u8(uint8(sub.Kind()))
			encodeBody(e, sub)
		}
	}
}

// decodeBody decodes the body of a record of kind k; top is false inside
// a Batch (batches do not nest).
func decodeBody(d *decoder, k Kind, top bool) Record {
	switch k {
	case KindInitCluster:
		return InitCluster{ClusterID: d.str()}
	case KindRegisterBroker:
		return RegisterBroker{ID: d.int32(), Incarnation: d.uuid(), KafkaAddr: d.str(), ControllerAddr: d.str(), Rack: d.str()}
	case KindRegisterBrokerListeners:
		r := RegisterBroker{ID: d.int32(), Incarnation: d.uuid(), KafkaAddr: d.str(), ControllerAddr: d.str(), Rack: d.str()}
		n := d.count(2)
		if n == 0 && d.err == nil {
			d.fail("RegisterBroker of kind 12 without listeners (that is kind 2)")
		}
		if n > 0 {
			r.Listeners = make([]Listener, n)
			for i := range r.Listeners {
				r.Listeners[i] = Listener{Name: d.str(), Addr: d.str()}
			}
		}
		return r
	case KindUpsertScramCredential:
		r := UpsertScramCredential{User: d.str(), Mechanism: ScramMechanism(d.u8())}
		r.Credential = ScramCredential{Iterations: d.int32(), Salt: d.bytes(), StoredKey: d.bytes(), ServerKey: d.bytes()}
		return r
	case KindDeleteScramCredential:
		return DeleteScramCredential{User: d.str(), Mechanism: ScramMechanism(d.u8())}
	case KindCreateACLs:
		return CreateACLs{ACLs: d.acls()}
	case KindDeleteACLs:
		return DeleteACLs{ACLs: d.acls()}
	case KindFenceBroker:
		return FenceBroker{ID: d.int32(), Epoch: d.varint()}
	case KindUnfenceBroker:
		return UnfenceBroker{ID: d.int32(), Epoch: d.varint()}
	case KindCreateTopic:
		return CreateTopic{Name: d.str(), ID: d.uuid(), Internal: d.bool(), Replicas: d.assignment(), Configs: d.strMap()}
	case KindDeleteTopic:
		return DeleteTopic{Name: d.str(), ID: d.uuid()}
	case KindCreatePartitions:
		return CreatePartitions{Name: d.str(), ID: d.uuid(), Replicas: d.assignment()}
	case KindChangePartition:
		r := ChangePartition{TopicID: d.uuid(), Partition: d.int32(), ExpectedPartitionEpoch: d.int32(), LeaderEpoch: d.optInt32()}
		if d.bool() {
			r.Requester = &BrokerEpoch{ID: d.int32(), Epoch: d.varint()}
		}
		r.Leader = d.optInt32()
		r.ISR = d.int32s()
		if n := d.count(1); n > 0 {
			r.ISREpochs = make([]int64, n)
			for i := range r.ISREpochs {
				r.ISREpochs[i] = d.varint()
			}
		}
		return r
	case KindAlterConfigs:
		r := AlterConfigs{Type: ConfigResourceType(d.u8()), Name: d.str()}
		if n := d.count(3); n > 0 {
			r.Ops = make([]ConfigOp, n)
			for i := range r.Ops {
				r.Ops[i].Key = d.str()
				r.Ops[i].Delete = d.bool()
				r.Ops[i].Value = d.str()
			}
		}
		return r
	case KindAllocateProducerIDs:
		return AllocateProducerIDs{Broker: d.int32(), BrokerEpoch: d.varint(), Count: d.int32()}
	case KindTakeOffice:
		return TakeOffice{Controller: d.int32(), Term: d.uvarint()}
	case KindInOffice:
		return InOffice{Controller: d.int32(), Term: d.uvarint()}
	case KindUnregisterBroker:
		return UnregisterBroker{ID: d.int32(), Epoch: d.varint()}
	case KindSetRemoteLog:
		return SetRemoteLog{TopicID: d.uuid(), Partition: d.int32(), Requester: BrokerEpoch{ID: d.int32(), Epoch: d.varint()},
			LeaderEpoch: d.int32(), Version: d.varint(), Manifest: d.bytes()}
	case KindReassignPartition:
		r := ReassignPartition{TopicID: d.uuid(), Partition: d.int32()}
		if d.bool() {
			r.Target = d.int32s()
			if r.Target == nil {
				r.Target = []int32{} // present but empty: Apply refuses it
			}
		}
		return r
	case KindBatch:
		if !top {
			d.fail("a Batch inside a Batch")
			return nil
		}
		var r Batch
		if n := d.count(1); n > 0 {
			r.Records = make([]Record, 0, n)
			for i := 0; i < n && d.err == nil; i++ {
				sub := Kind(d.u8())
				if d.err != nil {
					break
				}
				r.Records = append(r.Records, decodeBody(d, sub, false))
			}
		}
		return r
	}
	d.fail("unknown record kind %d", uint8(k))
	return nil
}

type encoder struct{ b []byte }

func (e *encoder) u8(v uint8)       { e.b = append(e.b, v) }
func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) uuid(u UUID)      { e.b = append(e.b, u[:]...) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) bool(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

// optInt32 writes a presence bool, then the value if present.
func (e *encoder) optInt32(v *int32) {
	e.bool(v != nil)
	if v != nil {
		e.varint(int64(*v))
	}
}

func (e *encoder) int32s(v []int32) { e.uvarint(uint64(len(v))); e.int32Elems(v) }
func (e *encoder) int32Elems(v []int32) {
	for _, x := range v {
		e.varint(int64(x))
	}
}

func (e *encoder) assignment(a [][]int32) {
	e.uvarint(uint64(len(a)))
	for _, r := range a {
		e.int32s(r)
	}
}

// strMap writes a map in increasing key order, so equal maps encode to
// equal bytes.
func (e *encoder) strMap(m map[string]string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	e.uvarint(uint64(len(keys)))
	for _, k := range keys {
		e.str(k)
		e.str(m[k])
	}
}

// decoder reads fields; the first error sticks and later reads return
// zero values, so callers check d.err once.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) u8() uint8 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int32() int32 {
	v := d.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("%d does not fit 32 bits", v)
		return 0
	}
	return int32(v)
}

// count reads a list length whose elements take at least minSize bytes
// each; a length the remaining bytes cannot hold is an error, so a bad
// length never allocates much.
func (d *decoder) count(minSize int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64(len(d.b)/minSize) {
		d.fail("list of %d elements in %d bytes", n, len(d.b))
		return 0
	}
	return int(n)
}

func (d *decoder) bool() bool {
	switch d.u8() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("bool is not 0 or 1")
	return false
}

func (d *decoder) uuid() UUID {
	var u UUID
	if d.err != nil {
		return u
	}
	if len(d.b) < len(u) {
		d.fail("truncated uuid")
		return u
	}
	copy(u[:], d.b)
	d.b = d.b[len(u):]
	return u
}

func (d *decoder) str() string {
	n := d.count(1)
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	if !utf8.ValidString(s) {
		d.fail("string is not UTF-8")
		return ""
	}
	return s
}

func (d *decoder) optInt32() *int32 {
	if !d.bool() {
		return nil
	}
	v := d.int32()
	return &v
}

func (d *decoder) int32s() []int32 {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	out := make([]int32, n)
	for i := range out {
		out[i] = d.int32()
	}
	return out
}

func (d *decoder) assignment() [][]int32 {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	out := make([][]int32, n)
	for i := range out {
		out[i] = d.int32s()
	}
	return out
}

func (d *decoder) strMap() map[string]string {
	n := d.count(2)
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	prev := ""
	for i := 0; i < n && d.err == nil; i++ {
		k, v := d.str(), d.str()
		if i > 0 && k <= prev {
			d.fail("map keys out of order: %q after %q", k, prev)
			break
		}
		m[k], prev = v, k
	}
	return m
}

// bytes writes a byte string: uv length, the bytes.
func (e *encoder) bytes(b []byte) { e.uvarint(uint64(len(b))); e.b = append(e.b, b...) }

// acls writes a list of bindings: per binding u8 resource type, str
// name, u8 pattern type, str principal, str host, u8 operation, u8
// permission.
func (e *encoder) acls(acls []ACLBinding) {
	e.uvarint(uint64(len(acls)))
	for _, a := range acls {
		e.u8(uint8(a.ResourceType))
		e.str(a.ResourceName)
		e.u8(uint8(a.PatternType))
		e.str(a.Principal)
		e.str(a.Host)
		e.u8(uint8(a.Operation))
		e.u8(uint8(a.Permission))
	}
}

// bytes reads a byte string (nil when empty), copied out of the input.
func (d *decoder) bytes() []byte {
	n := d.count(1)
	if d.err != nil || n == 0 {
		return nil
	}
	b := append([]byte(nil), d.b[:n]...)
	d.b = d.b[n:]
	return b
}

func (d *decoder) acls() []ACLBinding {
	n := d.count(7)
	if n == 0 {
		return nil
	}
	out := make([]ACLBinding, n)
	for i := range out {
		out[i] = ACLBinding{ResourceType: int8(d.u8()), ResourceName: d.str(), PatternType: int8(d.u8()),
			Principal: d.str(), Host: d.str(), Operation: int8(d.u8()), Permission: int8(d.u8())}
	}
	return out
}
