package client

import (
	"errors"
	"fmt"
	"testing"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

func TestIsComboError(t *testing.T) {
	ce := &combo.ComboError{Code: CodeUnavailable, Message: "redis down"}
	for _, err := range []error{ce, fmt.Errorf("call: %w", ce)} {
		got, ok := IsComboError(err)
		if !ok || got != ce {
			t.Fatalf("IsComboError(%v) = %v, %v", err, got, ok)
		}
	}
	for _, err := range []error{nil, errors.New("timeout"), (*combo.ComboError)(nil)} {
		if got, ok := IsComboError(err); ok {
			t.Fatalf("IsComboError(%v) = %v, true", err, got)
		}
	}
}

func TestNewClient(t *testing.T) {
	if _, err := NewClient(nil); err == nil {
		t.Fatal("NewClient(nil): want an error")
	}
	// Building does not dial; the client satisfies BatchSender.
	cli, err := NewClient([]string{"127.0.0.1:8888"})
	if err != nil {
		t.Fatal(err)
	}
	var _ BatchSender = cli
}
