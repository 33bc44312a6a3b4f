package netio

import (
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// ListGroups, key 16, versions 0-5.
//
//   - Every group with its protocol type; its state (v4+, with a states
//     filter, case-insensitive) and type, "classic" or "consumer" (KIP-848)
//     (v5+, with a types filter).

func handleListGroups(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrListGroupsRequest()
	if err := r.decode(req); err != nil {
		return s.malformed(r.conn, r, err.Error())
	}
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	match := func(filter []string, v string) bool {
		return len(filter) == 0 || slices.ContainsFunc(filter, func(f string) bool { return strings.EqualFold(f, v) })
	}
	// DESCRIBE on the cluster lists every group; otherwise only the
	// groups the principal may DESCRIBE, as in Kafka.
	all := r.clusterAllowed(kmsg.ACLOperationDescribe)
	listed := map[string]bool{}
	for _, g := range s.eng.Coordinator().Groups() {
		d := g.Describe()
		if !match(req.StatesFilter, string(d.State)) || !match(req.TypesFilter, d.Type) {
			continue
		}
		if !all && !r.groupAllowed(kmsg.ACLOperationDescribe, d.ID) {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = d.ID, d.ProtocolType, string(d.State), d.Type
		resp.Groups = append(resp.Groups, lg)
		listed[d.ID] = true
	}
	for _, id := range s.eng.Coordinator().ShareGroupIDs() {
		d, ok, err := s.eng.Coordinator().ShareGroup(id)
		if err != nil || !ok || listed[id] || !match(req.StatesFilter, d.State) || !match(req.TypesFilter, engine.ShareTypeName) {
			continue
		}
		if !all && !r.groupAllowed(kmsg.ACLOperationDescribe, id) {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = id, engine.ShareTypeName, d.State, engine.ShareTypeName
		resp.Groups = append(resp.Groups, lg)
	}
	r.respond(resp)
	return frameDone
}
