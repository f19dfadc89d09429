package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/security"
)

// The commands that show what only the REST API serves (a checkpoint's
// per-subtask statistics and its explanation, tasks' rates) read it from
// the jobmanager's REST address: --rest, or the --jobmanager host on the
// default REST port 8081. With --tls-* the same client certificate
// authenticates them.

// defaultRESTPort is the jobmanager's default REST port (its restAddress).
const defaultRESTPort = "8081"

// maxRESTBody bounds a REST answer the CLI reads.
const maxRESTBody = 16 << 20

// bindREST adds --rest to cmd.
func (c *clientConfig) bindREST(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&c.rest, "rest", os.Getenv("WEIR_REST"),
		"jobmanager REST address, host:port (env WEIR_REST; default: the --jobmanager host, port "+defaultRESTPort+")")
}

// restBase is the REST API's base URL.
func (c *clientConfig) restBase() (string, error) {
	addr := c.rest
	if addr == "" {
		host, _, err := net.SplitHostPort(c.jobmanager)
		if err != nil {
			return "", fmt.Errorf("--jobmanager %q is not host:port; pass the REST address with --rest host:port", c.jobmanager)
		}
		addr = net.JoinHostPort(host, defaultRESTPort)
	}
	addr = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(addr, "http://"), "https://"), "/")
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("--rest %q: want host:port", c.rest)
	}
	scheme := "http"
	if c.tls.Enabled() {
		scheme = "https"
	}
	return scheme + "://" + addr, nil
}

// restGet reads the REST document at path (segments already escaped)
// into out. A refusal becomes the API's error text.
func (c *clientConfig) restGet(ctx context.Context, what, path string, out any) error {
	base, err := c.restBase()
	if err != nil {
		return err
	}
	hc := &http.Client{}
	if c.tls.Enabled() {
		m, err := c.tls.Load()
		if err != nil {
			return err
		}
		hc.Transport = &http.Transport{TLSClientConfig: m.ClientConfig(security.RoleJobManager)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%s: cannot reach the jobmanager's REST API at %s (%v); pass its address with --rest host:port (env WEIR_REST)", what, base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRESTBody+1))
	if err != nil {
		return fmt.Errorf("%s: reading the answer of %s: %w", what, base, err)
	}
	if len(body) > maxRESTBody {
		return fmt.Errorf("%s: the answer of %s is larger than %d bytes", what, base, maxRESTBody)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s: %s", what, e.Error)
		}
		return fmt.Errorf("%s: the REST API at %s answered %s", what, base, resp.Status)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s: the answer of %s is not the expected JSON: %w", what, base, err)
	}
	return nil
}
