package security

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestACLValidation(t *testing.T) {
	good := binding(topic, "orders", lit, "User:alice", opRead, allow)
	for name, edit := range map[string]func(*ACL){
		"resource ANY":         func(a *ACL) { a.ResourceType = kmsg.ACLResourceTypeAny },
		"resource UNKNOWN":     func(a *ACL) { a.ResourceType = kmsg.ACLResourceTypeUnknown },
		"resource 99":          func(a *ACL) { a.ResourceType = 99 },
		"pattern ANY":          func(a *ACL) { a.PatternType = kmsg.ACLResourcePatternTypeAny },
		"pattern MATCH":        func(a *ACL) { a.PatternType = kmsg.ACLResourcePatternTypeMatch },
		"pattern UNKNOWN":      func(a *ACL) { a.PatternType = kmsg.ACLResourcePatternTypeUnknown },
		"operation ANY":        func(a *ACL) { a.Operation = kmsg.ACLOperationAny },
		"operation UNKNOWN":    func(a *ACL) { a.Operation = kmsg.ACLOperationUnknown },
		"operation 15":         func(a *ACL) { a.Operation = 15 },
		"permission ANY":       func(a *ACL) { a.Permission = kmsg.ACLPermissionTypeAny },
		"permission UNKNOWN":   func(a *ACL) { a.Permission = kmsg.ACLPermissionTypeUnknown },
		"principal bare":       func(a *ACL) { a.Principal = "alice" },
		"principal empty user": func(a *ACL) { a.Principal = "User:" },
		"principal other type": func(a *ACL) { a.Principal = "Group:ops" },
		"principal lowercase":  func(a *ACL) { a.Principal = "user:alice" },
		"principal not UTF-8":  func(a *ACL) { a.Principal = "User:\xff" },
		"empty host":           func(a *ACL) { a.Host = "" },
		"empty name":           func(a *ACL) { a.ResourceName = "" },
		"name not UTF-8":       func(a *ACL) { a.ResourceName = "or\xffders" },
		"cluster misnamed":     func(a *ACL) { a.ResourceType, a.ResourceName = cluster, "mycluster" },
	} {
		a := good
		edit(&a)
		if err := a.Validate(); !errors.Is(err, ErrInvalidACL) {
			t.Errorf("%s: %v, want ErrInvalidACL", name, err)
		}
	}
	for name, edit := range map[string]func(*ACL){
		"as is":              func(*ACL) {},
		"prefixed":           func(a *ACL) { a.PatternType = pre },
		"wildcard principal": func(a *ACL) { a.Principal = "User:*" },
		"wildcard name":      func(a *ACL) { a.ResourceName = "*" },
		"one host":           func(a *ACL) { a.Host = "10.0.0.1" },
		"deny all":           func(a *ACL) { a.Permission, a.Operation = deny, opAll },
		"cluster": func(a *ACL) {
			a.ResourceType, a.ResourceName, a.Operation = cluster, "kafka-cluster", kmsg.ACLOperationClusterAction
		},
		"user resource":   func(a *ACL) { a.ResourceType = kmsg.ACLResourceTypeUser },
		"describe tokens": func(a *ACL) { a.Operation = kmsg.ACLOperationDescribeTokens },
	} {
		a := good
		edit(&a)
		if err := a.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestValidateFilter(t *testing.T) {
	everything := ACLFilter{ResourceType: kmsg.ACLResourceTypeAny, PatternType: kmsg.ACLResourcePatternTypeAny, Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny}
	if err := ValidateFilter(everything); err != nil {
		t.Fatalf("match-everything filter: %v", err)
	}
	for name, edit := range map[string]func(*ACLFilter){
		"resource UNKNOWN":   func(f *ACLFilter) { f.ResourceType = kmsg.ACLResourceTypeUnknown },
		"resource 8":         func(f *ACLFilter) { f.ResourceType = 8 },
		"pattern UNKNOWN":    func(f *ACLFilter) { f.PatternType = kmsg.ACLResourcePatternTypeUnknown },
		"pattern 5":          func(f *ACLFilter) { f.PatternType = 5 },
		"operation UNKNOWN":  func(f *ACLFilter) { f.Operation = kmsg.ACLOperationUnknown },
		"operation -1":       func(f *ACLFilter) { f.Operation = -1 },
		"permission UNKNOWN": func(f *ACLFilter) { f.Permission = kmsg.ACLPermissionTypeUnknown },
		"permission 4":       func(f *ACLFilter) { f.Permission = 4 },
	} {
		f := everything
		edit(&f)
		if err := ValidateFilter(f); !errors.Is(err, ErrInvalidACL) {
			t.Errorf("%s: %v, want ErrInvalidACL", name, err)
		}
	}
	for name, edit := range map[string]func(*ACLFilter){
		"MATCH":   func(f *ACLFilter) { f.PatternType = kmsg.ACLResourcePatternTypeMatch },
		"topic":   func(f *ACLFilter) { f.ResourceType = topic },
		"DENY":    func(f *ACLFilter) { f.Permission = deny },
		"ALL":     func(f *ACLFilter) { f.Operation = opAll },
		"literal": func(f *ACLFilter) { f.PatternType = lit },
	} {
		f := everything
		edit(&f)
		if err := ValidateFilter(f); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestFilterMatches(t *testing.T) {
	orders := binding(topic, "orders", lit, "User:a", opRead, allow)
	ord := binding(topic, "ord", pre, "User:a", opWrite, allow)
	star := binding(topic, "*", lit, "User:b", opRead, deny)
	payroll := binding(topic, "payroll", lit, "User:b", opRead, allow)
	ordersPrefix := binding(topic, "orders", pre, "User:c", opRead, allow)
	orderGroup := binding(group, "orders", lit, "User:a", opRead, allow)
	hosted := orders
	hosted.Host = "10.0.0.1"
	all := []ACL{orders, ord, star, payroll, ordersPrefix, orderGroup, hosted}
	anyF := ACLFilter{ResourceType: kmsg.ACLResourceTypeAny, PatternType: kmsg.ACLResourcePatternTypeAny, Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny}
	with := func(edit func(*ACLFilter)) ACLFilter {
		f := anyF
		edit(&f)
		return f
	}
	for name, tc := range map[string]struct {
		f    ACLFilter
		want []ACL
	}{
		"everything":        {anyF, all},
		"topics":            {with(func(f *ACLFilter) { f.ResourceType = topic }), []ACL{orders, ord, star, payroll, ordersPrefix, hosted}},
		"name, any pattern": {with(func(f *ACLFilter) { f.ResourceName = ptr("orders") }), []ACL{orders, ordersPrefix, orderGroup, hosted}},
		"literal orders":    {with(func(f *ACLFilter) { f.ResourceName, f.PatternType = ptr("orders"), lit }), []ACL{orders, orderGroup, hosted}},
		"prefixed orders":   {with(func(f *ACLFilter) { f.ResourceName, f.PatternType = ptr("orders"), pre }), []ACL{ordersPrefix}},
		"prefixed, no name": {with(func(f *ACLFilter) { f.PatternType = pre }), []ACL{ord, ordersPrefix}},
		"match orders": {with(func(f *ACLFilter) {
			f.ResourceType, f.ResourceName, f.PatternType = topic, ptr("orders"), kmsg.ACLResourcePatternTypeMatch
		}), []ACL{orders, ord, star, ordersPrefix, hosted}},
		"match ord": {with(func(f *ACLFilter) {
			f.ResourceType, f.ResourceName, f.PatternType = topic, ptr("ord"), kmsg.ACLResourcePatternTypeMatch
		}), []ACL{ord, star}},
		"match, no name":  {with(func(f *ACLFilter) { f.PatternType = kmsg.ACLResourcePatternTypeMatch }), all},
		"literal star":    {with(func(f *ACLFilter) { f.ResourceName, f.PatternType = ptr("*"), lit }), []ACL{star}},
		"principal b":     {with(func(f *ACLFilter) { f.Principal = ptr("User:b") }), []ACL{star, payroll}},
		"host":            {with(func(f *ACLFilter) { f.Host = ptr("10.0.0.1") }), []ACL{hosted}},
		"wildcard host":   {with(func(f *ACLFilter) { f.Host = ptr("*") }), []ACL{orders, ord, star, payroll, ordersPrefix, orderGroup}},
		"write":           {with(func(f *ACLFilter) { f.Operation = opWrite }), []ACL{ord}},
		"deny":            {with(func(f *ACLFilter) { f.Permission = deny }), []ACL{star}},
		"nothing matches": {with(func(f *ACLFilter) { f.Principal = ptr("User:z") }), nil},
	} {
		var got []ACL
		for _, a := range all {
			if tc.f.Matches(a) {
				got = append(got, a)
			}
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: matched %+v, want %+v", name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: matched %+v, want %+v", name, got, tc.want)
				break
			}
		}
	}
}
