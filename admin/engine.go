package admin

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/engine"
)

// ForEngine is the Service of a single broker: every change is made by
// e, which keeps it in its own metadata file. Replicas can only be e's
// own node.
func ForEngine(e *engine.Engine) Service { return engineService{e} }

type engineService struct{ e *engine.Engine }

func describeEngineTopic(t *engine.Topic) Topic {
	return Topic{Name: t.Name, ID: t.ID, Internal: t.Internal, Partitions: int32(len(t.Partitions())),
		ReplicationFactor: 1, Configs: t.Config().Overrides()}
}

func (s engineService) Topic(name string) (Topic, bool) {
	if t := s.e.Topic(name); t != nil {
		return describeEngineTopic(t), true
	}
	return Topic{}, false
}

func (s engineService) TopicByID(id [16]byte) (Topic, bool) {
	if t := s.e.TopicByID(engine.TopicID(id)); t != nil {
		return describeEngineTopic(t), true
	}
	return Topic{}, false
}

// onlyHere refuses replicas on any broker but this one.
func (s engineService) onlyHere(as [][]int32, first int) error {
	self := s.e.NodeID()
	for i, reps := range as {
		if len(reps) != 1 || reps[0] != self {
			return fmt.Errorf("%w: partition %d assigned to %v; the only broker is %d", kerr.InvalidReplicaAssignment, first+i, reps, self)
		}
	}
	return nil
}

func (s engineService) CreateTopic(_ context.Context, nt NewTopic, validateOnly bool) (Topic, error) {
	req := engine.CreateTopicRequest{Name: nt.Name, Partitions: nt.Partitions, ReplicationFactor: nt.ReplicationFactor,
		Configs: nt.Configs, ValidateOnly: validateOnly}
	if nt.Assignment != nil {
		if err := s.onlyHere(nt.Assignment, 0); err != nil {
			return Topic{}, err
		}
		req.Partitions, req.ReplicationFactor = int32(len(nt.Assignment)), 1
	}
	t, err := s.e.CreateTopic(req)
	if err != nil {
		return Topic{}, err
	}
	if t != nil {
		return describeEngineTopic(t), nil
	}
	if req.Partitions == -1 {
		req.Partitions = s.e.DefaultPartitions()
	}
	return Topic{Name: nt.Name, Partitions: req.Partitions, ReplicationFactor: 1, Configs: nt.Configs}, nil
}

func (s engineService) DeleteTopic(_ context.Context, name string, id [16]byte) ([16]byte, error) {
	t, ok := s.Topic(name)
	if !ok {
		return [16]byte{}, fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, name)
	}
	if err := t.CheckID(id); err != nil {
		return [16]byte{}, err
	}
	return t.ID, s.e.DeleteTopic(name)
}

func (s engineService) CreatePartitions(_ context.Context, p NewPartitions, validateOnly bool) error {
	t := s.e.Topic(p.Topic)
	if t == nil {
		return fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, p.Topic)
	}
	if t.Internal {
		// Groups and transactional ids map to partitions by count:
		// more partitions would move them away from their state.
		return fmt.Errorf("%w: %s is one of the broker's internal topics; its partition count is fixed", kerr.InvalidPartitions, p.Topic)
	}
	cur := int32(len(t.Partitions()))
	if p.Count <= cur {
		return fmt.Errorf("%w: topic %q has %d partitions; the new count must be larger", kerr.InvalidPartitions, p.Topic, cur)
	}
	if p.Assignment != nil {
		if err := p.CheckAssignment(cur, 1); err != nil {
			return err
		}
		if err := s.onlyHere(p.Assignment, int(cur)); err != nil {
			return err
		}
	}
	return s.e.CreatePartitions(p.Topic, p.Count, validateOnly)
}

func (s engineService) AlterConfigs(_ context.Context, c ConfigChange, validateOnly bool) error {
	if c.Type == GroupConfigs {
		current := s.e.GroupConfigs(c.Name)
		set, err := c.Resolve(current, func(k string) string { return current[k] })
		if err != nil {
			return err
		}
		return s.e.AlterGroupConfigs(c.Name, set, validateOnly)
	}
	if c.Type == BrokerDefaults {
		current := s.e.BrokerConfigs()
		set, err := c.Resolve(current, func(k string) string {
			if v, ok := current[k]; ok {
				return v
			}
			d, _ := engine.LookupTopicConfig(k)
			return d.Default
		})
		if err != nil {
			return err
		}
		return s.e.AlterBrokerDefaults(set, validateOnly)
	}
	return s.e.AlterTopicConfigWith(c.Name, func(cfg *engine.TopicConfig) (map[string]*string, error) {
		return c.Resolve(cfg.Overrides(), func(k string) string { v, _ := cfg.Get(k); return v })
	}, validateOnly)
}

// ElectLeaders on a single broker: every partition already has its only
// replica as leader.
func (s engineService) ElectLeaders(_ context.Context, typ ElectionType, parts []PartitionRef) ([]Election, error) {
	if typ != PreferredElection && typ != UncleanElection {
		return nil, fmt.Errorf("%w: election type %d (0 preferred, 1 unclean)", kerr.InvalidRequest, typ)
	}
	if parts == nil {
		return nil, nil
	}
	out := make([]Election, len(parts))
	for i, p := range parts {
		out[i] = Election{PartitionRef: p, Err: fmt.Errorf("%w: %s-%d is led by its only replica", kerr.ElectionNotNeeded, p.Topic, p.Partition)}
		if t := s.e.Topic(p.Topic); t == nil || t.Partition(p.Partition) == nil {
			out[i].Err = fmt.Errorf("%w: %s-%d", kerr.UnknownTopicOrPartition, p.Topic, p.Partition)
		}
	}
	return out, nil
}

// AlterPartitionReassignments on a single broker: the only assignment is
// this broker alone, so a move to it changes nothing and any other is
// refused.
func (s engineService) AlterPartitionReassignments(_ context.Context, rs []Reassignment, allowRFChange bool) ([]error, error) {
	out := make([]error, len(rs))
	self := s.e.NodeID()
	for i, r := range rs {
		switch t := s.e.Topic(r.Topic); {
		case t == nil || t.Partition(r.Partition) == nil:
			out[i] = fmt.Errorf("%w: %s-%d", kerr.UnknownTopicOrPartition, r.Topic, r.Partition)
		case r.Replicas == nil:
			out[i] = fmt.Errorf("%w: %s-%d is not being reassigned", kerr.NoReassignmentInProgress, r.Topic, r.Partition)
		case len(r.Replicas) != 1 && !allowRFChange:
			out[i] = fmt.Errorf("%w: %s-%d has 1 replica, not %d", kerr.InvalidReplicationFactor, r.Topic, r.Partition, len(r.Replicas))
		case len(r.Replicas) != 1 || r.Replicas[0] != self:
			out[i] = fmt.Errorf("%w: %s-%d: this single broker (%d) is the only one", kerr.InvalidReplicaAssignment, r.Topic, r.Partition, self)
		}
	}
	return out, nil
}

// ListPartitionReassignments on a single broker: nothing ever moves.
func (s engineService) ListPartitionReassignments(context.Context, []PartitionRef) ([]OngoingReassignment, error) {
	return nil, nil
}
