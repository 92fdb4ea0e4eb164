package client

import (
	"errors"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/connpool"
	"github.com/cloudwego/kitex/transport"

	"github.com/combo-service/combo-service/internal/connreset"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
)

// ServiceName is the Kitex service name of combo-service (CONTRACT.md §1).
const ServiceName = "combo-service"

// Defaults NewClient applies before the caller's own options, which win.
const (
	DefaultClientRPCTimeout     = time.Second
	DefaultClientConnectTimeout = 200 * time.Millisecond
)

// ComboError codes (CONTRACT.md §1).
const (
	// CodeInvalidArgument: the request can never succeed as sent; do not retry.
	CodeInvalidArgument int32 = 1
	// CodeUnavailable: a dependency is down; retrying later may succeed.
	CodeUnavailable int32 = 2
	// CodeInternal: an unexpected server failure.
	CodeInternal int32 = 3
)

// NewClient builds a Kitex client for combo-service talking to hostPorts
// ("host:port"), with an RPC timeout of DefaultClientRPCTimeout and a connect
// timeout of DefaultClientConnectTimeout. opts are applied after these
// defaults, so a caller's client.WithRPCTimeout (or any other option)
// overrides them, with one exception: Kitex ORs transport protocols
// together, so TTHeader framing stays on (Framed alone still gives
// TTHeaderFramed, and PurePayload, unframed, is refused by the service,
// which takes framed requests only). A caller that must speak without
// TTHeader builds its client with comboservice.NewClient and
// transport.Framed. The returned client satisfies BatchSender.
func NewClient(hostPorts []string, opts ...kclient.Option) (comboservice.Client, error) {
	if len(hostPorts) == 0 {
		return nil, errors.New("combo client: NewClient needs at least one host:port")
	}
	all := make([]kclient.Option, 0, 4+len(opts))
	all = append(all,
		kclient.WithHostPorts(hostPorts...),
		kclient.WithRPCTimeout(DefaultClientRPCTimeout),
		kclient.WithConnectTimeout(DefaultClientConnectTimeout),
		// Kitex keeps 10 idle connections per address by default: a caller
		// with more calls in flight would redial on every call. 64 covers a
		// busy activityService replica; pass WithLongConnection to change it.
		kclient.WithLongConnection(connpool.IdleConfig{MaxIdlePerAddress: 64, MaxIdleGlobal: 1024, MaxIdleTimeout: time.Minute}),
		// TTHeader framing carries the server's "close this connection"
		// mark: a stopping replica sets it on every answer, and the pool
		// then drops the connection instead of sending the next call down
		// it, so retries reach a replica that is still up.
		kclient.WithTransportProtocol(transport.TTHeaderFramed),
		kclient.WithMetaHandler(connreset.Client{}),
	)
	all = append(all, opts...)
	return comboservice.NewClient(ServiceName, all...)
}

// IsComboError reports whether err is, or wraps, the ComboError exception
// combo-service declares on every method, and returns it.
func IsComboError(err error) (*combo.ComboError, bool) {
	var ce *combo.ComboError
	if errors.As(err, &ce) && ce != nil {
		return ce, true
	}
	return nil, false
}
