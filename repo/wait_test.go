package repo_test

import "github.com/combo-service/combo-service/internal/testwait"

// waitFor waits for cond, failing the test after testwait.Deadline.
var waitFor = testwait.For
