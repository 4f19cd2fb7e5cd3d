package credential

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.Main(m) }
