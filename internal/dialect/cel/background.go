package cel

import (
	"context"
	"errors"

	"github.com/morph-dev/morph/internal/engine"
)

// errBackgroundNotYet is returned until the background semantics land.
var errBackgroundNotYet = errors.New("not yet: mutateExisting triggers and targets are being implemented")

// background describes the policy's mutateExisting behaviour for the engine.
func (m *Mutator) background() *engine.Background {
	return &engine.Background{
		Triggers: func(context.Context, *engine.Request) (bool, error) { return false, errBackgroundNotYet },
		Targets: func(context.Context, *engine.Request, engine.Objects) ([]engine.ObjectRef, error) {
			return nil, errBackgroundNotYet
		},
	}
}
