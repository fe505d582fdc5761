package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"signet.dev/signet/reconciler"
)

// daemonAddr is the running daemon's main listener: addr when given,
// otherwise the config's listen, otherwise reconciler.DefaultListen.
func daemonAddr(addr string, cfg *reconciler.Config) string {
	if addr == "" && cfg != nil {
		addr = cfg.Listen
	}
	if addr == "" {
		addr = reconciler.DefaultListen
	}
	return addr
}

// statusRequestTimeout bounds one GET /status.
const statusRequestTimeout = 10 * time.Second

// fetchStatus reads the daemon's GET /status at addr.
func fetchStatus(ctx context.Context, addr string) (*reconciler.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, statusRequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the daemon's status at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read the daemon's status at %s: %s", addr, resp.Status)
	}
	var st reconciler.Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&st); err != nil {
		return nil, fmt.Errorf("read the daemon's status at %s: %w", addr, err)
	}
	return &st, nil
}
