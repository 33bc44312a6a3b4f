package batch

import "testing"

func TestControlBatchRoundTrip(t *testing.T) {
	for _, typ := range []ControlType{ControlAbort, ControlCommit} {
		b := AppendControl(nil, 4242, 7, typ, 3, 1700000000000)
		h, err := CheckStored(b)
		if err != nil {
			t.Fatalf("%v: stored check: %v", typ, err)
		}
		if !h.Control() || !h.Transactional() || h.ProducerID != 4242 || h.ProducerEpoch != 7 || h.BaseSequence != -1 || h.RecordCount != 1 {
			t.Fatalf("%v: header %+v", typ, h)
		}
		got, err := ControlRecordType(b, &h)
		if err != nil || got != typ {
			t.Fatalf("ControlRecordType = %v, %v; want %v", got, err, typ)
		}
		if _, err := Validate(b, Limits{}); ClassOf(err) != ClassInvalid {
			t.Fatalf("a produced control batch must be refused as invalid, got %v", err)
		}
	}
	plain := NewBuilder()
	plain.Add(1, []byte("k"), []byte("v"), nil)
	b, _ := plain.Build(nil, CodecNone)
	h, _ := ParseHeader(b)
	if _, err := ControlRecordType(b, &h); err == nil {
		t.Fatal("a data batch was read as a control batch")
	}
	// The builder's control bits do not leak into the next batch.
	plain.Reset()
	if plain.attrs != 0 {
		t.Fatal("Reset kept the control attributes")
	}
}

func TestTransactionalBatchValidates(t *testing.T) {
	b := NewBuilder()
	b.ProducerID, b.ProducerEpoch, b.BaseSequence = 9, 0, 0
	b.Transactional = true
	b.Add(1, []byte("k"), []byte("v"), nil)
	out, _ := b.Build(nil, CodecNone)
	h, err := Validate(out, Limits{})
	if err != nil || !h.Transactional() {
		t.Fatalf("transactional idempotent batch: %+v %v", h, err)
	}
}
