package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/client"
	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/security"
	"github.com/weirstream/weir/stream"
)

// clientConfig is what every client command shares.
type clientConfig struct {
	jobmanager string
	output     string
	timeout    time.Duration
	// haEndpoints and haPrefix find the leading jobmanager through etcd
	// instead of --jobmanager.
	haEndpoints []string
	haPrefix    string
	// tls is the client's TLS material (--tls-ca, --tls-cert, --tls-key).
	tls security.TLSConfig
	// etcdTLS and etcdUser reach a TLS or password-protected etcd
	// (--ha-etcd-ca, --ha-etcd-cert, --ha-etcd-key, --ha-etcd-user).
	etcdTLS  ha.TLSFiles
	etcdUser string
	// client is the client dial made, to name the jobmanager it reached.
	client *client.Client
	// rest is the jobmanager's REST address (--rest, rest.go).
	rest string
}

func (c *clientConfig) bind(cmd *cobra.Command) {
	def := os.Getenv("WEIR_JOBMANAGER")
	if def == "" {
		def = "127.0.0.1:6123"
	}
	cmd.PersistentFlags().StringVar(&c.jobmanager, "jobmanager", def, "jobmanager gRPC address (env WEIR_JOBMANAGER)")
	cmd.PersistentFlags().StringVarP(&c.output, "output", "o", "table", "output format: table or json")
	cmd.PersistentFlags().DurationVar(&c.timeout, "timeout", 10*time.Second, "how long to wait for the jobmanager to answer")
	var eps []string
	if env := os.Getenv("WEIR_HA_ETCD_ENDPOINTS"); env != "" {
		for _, e := range strings.Split(env, ",") {
			if e = strings.TrimSpace(e); e != "" {
				eps = append(eps, e)
			}
		}
	}
	prefix := os.Getenv("WEIR_HA_PREFIX")
	if prefix == "" {
		prefix = "/weir"
	}
	cmd.PersistentFlags().StringSliceVar(&c.haEndpoints, "ha-etcd-endpoints", eps,
		"find the leading jobmanager through these etcd endpoints instead of --jobmanager (env WEIR_HA_ETCD_ENDPOINTS, comma-separated)")
	cmd.PersistentFlags().StringVar(&c.haPrefix, "ha-prefix", prefix, "etcd key prefix of the cluster, with --ha-etcd-endpoints (env WEIR_HA_PREFIX)")
	cmd.PersistentFlags().StringVar(&c.etcdTLS.CAFile, "ha-etcd-ca", os.Getenv("WEIR_HA_ETCD_CA"), "etcd's CA certificate (PEM) for TLS to etcd (env WEIR_HA_ETCD_CA)")
	cmd.PersistentFlags().StringVar(&c.etcdTLS.CertFile, "ha-etcd-cert", os.Getenv("WEIR_HA_ETCD_CERT"), "client certificate (PEM) presented to etcd (env WEIR_HA_ETCD_CERT)")
	cmd.PersistentFlags().StringVar(&c.etcdTLS.KeyFile, "ha-etcd-key", os.Getenv("WEIR_HA_ETCD_KEY"), "the private key of --ha-etcd-cert (env WEIR_HA_ETCD_KEY)")
	cmd.PersistentFlags().StringVar(&c.etcdUser, "ha-etcd-user", os.Getenv("WEIR_HA_ETCD_USER"),
		"etcd user to log in as; the password from WEIR_HA_ETCD_PASSWORD (env WEIR_HA_ETCD_USER)")
	cmd.PersistentFlags().StringVar(&c.tls.CAFile, "tls-ca", os.Getenv("WEIR_TLS_CA"),
		"cluster CA certificate (PEM) for mutual TLS to the jobmanager, with --tls-cert and --tls-key (env WEIR_TLS_CA)")
	cmd.PersistentFlags().StringVar(&c.tls.CertFile, "tls-cert", os.Getenv("WEIR_TLS_CERT"),
		"client certificate (PEM, role operate or read; weir certs init makes operator.pem and reader.pem) (env WEIR_TLS_CERT)")
	cmd.PersistentFlags().StringVar(&c.tls.KeyFile, "tls-key", os.Getenv("WEIR_TLS_KEY"), "the private key of --tls-cert (PEM) (env WEIR_TLS_KEY)")
	c.bindREST(cmd)
}

func (c *clientConfig) validate() error {
	if c.output != "table" && c.output != "json" {
		return fmt.Errorf("--output %q: want table or json", c.output)
	}
	return nil
}

// dial returns a JobService client that follows the leader (package
// client): the one etcd names with --ha-etcd-endpoints, else --jobmanager,
// or the leader a standby names. Connections are made lazily; errors
// surface on the first call and are explained by callErr.
func (c *clientConfig) dial() (weirpb.JobServiceClient, func(), error) {
	if err := c.validate(); err != nil {
		return nil, nil, err
	}
	cfg := client.Config{EtcdEndpoints: c.haEndpoints, EtcdPrefix: c.haPrefix, TLS: c.tls,
		EtcdTLS: c.etcdTLS, EtcdUser: c.etcdUser, EtcdPassword: os.Getenv(envEtcdPassword)}
	if len(c.haEndpoints) == 0 {
		cfg.JobManagers = []string{c.jobmanager}
	}
	cl, err := client.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	c.client = cl
	return cl.API(), func() { cl.Close() }, nil
}

// connect dials the jobmanager and returns a client, a context bounded by
// --timeout, and a function that releases both.
func (c *clientConfig) connect(cmd *cobra.Command) (weirpb.JobServiceClient, context.Context, func(), error) {
	client, closeFn, err := c.dial()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := c.ctx(cmd.Context())
	return client, ctx, func() { cancel(); closeFn() }, nil
}

// callErr turns an RPC error into one message that says what to do.
func (c *clientConfig) callErr(what string, err error) error {
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		where := "at " + c.jobmanager
		if len(c.haEndpoints) > 0 {
			where = fmt.Sprintf("through etcd %v (prefix %s)", c.haEndpoints, c.haPrefix)
		}
		return fmt.Errorf("%s: cannot reach the jobmanager %s (%s); start a cluster with `weir local` or pass --jobmanager / WEIR_JOBMANAGER (--ha-etcd-endpoints for a cluster on etcd)",
			what, where, st.Message())
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.AlreadyExists, codes.ResourceExhausted:
		return fmt.Errorf("%s: %s", what, st.Message())
	case codes.PermissionDenied, codes.Unauthenticated:
		return fmt.Errorf("%s: refused: %s; use a certificate with the needed role (--tls-cert)", what, st.Message())
	}
	return fmt.Errorf("%s: %v", what, err)
}

func (c *clientConfig) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, c.timeout)
}

func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

func table(w io.Writer, header string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func fmtTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).Local().Format("2006-01-02 15:04:05")
}

func trimEnum(s, prefix string) string { return strings.ToLower(strings.TrimPrefix(s, prefix)) }

func jobState(s weirpb.JobState) string   { return trimEnum(s.String(), "JOB_STATE_") }
func taskState(s weirpb.TaskState) string { return trimEnum(s.String(), "TASK_STATE_") }

func terminalJob(s weirpb.JobState) bool {
	return s == weirpb.JobState_JOB_STATE_FINISHED || s == weirpb.JobState_JOB_STATE_CANCELED || s == weirpb.JobState_JOB_STATE_FAILED
}

func newSubmitCommand(cc *clientConfig, reg *stream.Registry) *cobra.Command {
	var wait, allowNonRestored bool
	var slotWait time.Duration
	var from string
	cmd := &cobra.Command{
		Use:   "submit FILE",
		Short: "Check a YAML job spec and submit it to the jobmanager",
		Long: "submit checks the job spec, submits it and prints the job's id. With --from, on a terminal, it then\n" +
			"shows the bytes of state the tasks restored until every task runs, on a line it erases when done.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, err := jobspec.Load(args[0], reg)
			if err != nil {
				return err
			}
			client, ctx, done, err := cc.connect(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := client.SubmitJob(ctx, &weirpb.SubmitJobRequest{Graph: weirpb.FromGraph(g), SlotWaitMs: slotWait.Milliseconds(),
				RestoreFrom: from, AllowNonRestoredState: allowNonRestored})
			if err != nil {
				return cc.callErr("submit "+args[0], err)
			}
			if cc.output == "json" {
				if err := printJSON(cmd.OutOrStdout(), resp); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "submitted job %q as %s\n", g.Name, resp.GetJobId())
			}
			if line := newProgressLine(cmd.OutOrStdout(), cc.output); from != "" && line.on() {
				watchRestore(cmd.Context(), cc, client, line, resp.GetJobId())
			}
			if !wait {
				return nil
			}
			return waitJob(cmd, cc, client, resp.GetJobId())
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the job ends; exit non-zero unless it finished")
	cmd.Flags().DurationVar(&slotWait, "slot-wait", 0, "how long the job may wait for free slots (0: the jobmanager's default)")
	cmd.Flags().StringVar(&from, "from", "", "start from a retained checkpoint of another job: JOB_ID@N, or <checkpoint storage>/<job id>/chk-N; operators are matched by uid")
	cmd.Flags().BoolVar(&allowNonRestored, "allow-non-restored-state", false, "with --from, drop the state of operators the job no longer has")
	return cmd
}

// waitJob polls the job until it reaches a terminal state.
func waitJob(cmd *cobra.Command, cc *clientConfig, client weirpb.JobServiceClient, id string) error {
	for {
		ctx, cancel := cc.ctx(cmd.Context())
		resp, err := client.GetJob(ctx, &weirpb.GetJobRequest{JobId: id})
		cancel()
		if err != nil {
			return cc.callErr("job "+id, err)
		}
		j := resp.GetJob()
		if terminalJob(j.GetState()) {
			if cc.output == "table" {
				fmt.Fprintf(cmd.OutOrStdout(), "job %s %s\n", id, jobState(j.GetState()))
			}
			if j.GetState() != weirpb.JobState_JOB_STATE_FINISHED {
				msg := j.GetError()
				if msg == "" {
					msg = "no error recorded"
				}
				return fmt.Errorf("job %s %s: %s", id, jobState(j.GetState()), msg)
			}
			return nil
		}
		select {
		case <-cmd.Context().Done():
			return cmd.Context().Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func newJobsCommand(cc *clientConfig, reg *stream.Registry) *cobra.Command {
	cmd := &cobra.Command{Use: "jobs", Short: "List, inspect, cancel and stop jobs"}
	cmd.AddCommand(newStopCommand(cc), newPlanCommand(cc, reg))
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List jobs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, ctx, done, err := cc.connect(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := client.ListJobs(ctx, &weirpb.ListJobsRequest{})
			if err != nil {
				return cc.callErr("list jobs", err)
			}
			if cc.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			var rows [][]string
			for _, j := range resp.GetJobs() {
				rows = append(rows, []string{j.GetJobId(), j.GetName(), jobState(j.GetState()),
					fmt.Sprintf("%d/%d", j.GetTasksRunning(), j.GetTasksTotal()), fmtTime(j.GetStartTimeMs()), fmtTime(j.GetEndTimeMs())})
			}
			return table(cmd.OutOrStdout(), "ID\tNAME\tSTATE\tTASKS RUNNING\tSTARTED\tENDED", rows)
		},
	})
	var wait bool
	statusCmd := &cobra.Command{
		Use:   "status ID",
		Short: "Show a job and its tasks",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, closeFn, err := cc.dial()
			if err != nil {
				return err
			}
			defer closeFn()
			if wait {
				if err := waitJob(cmd, cc, client, args[0]); err != nil {
					return err
				}
			}
			ctx, cancel := cc.ctx(cmd.Context())
			defer cancel()
			resp, err := client.GetJob(ctx, &weirpb.GetJobRequest{JobId: args[0]})
			if err != nil {
				return cc.callErr("job "+args[0], err)
			}
			if cc.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			j := resp.GetJob()
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "job %s (%s): %s, started %s, ended %s\n", j.GetJobId(), j.GetName(), jobState(j.GetState()),
				fmtTime(j.GetStartTimeMs()), fmtTime(j.GetEndTimeMs()))
			if j.GetError() != "" {
				fmt.Fprintf(w, "error: %s\n", j.GetError())
			}
			// The rates come from the REST API; without it the table
			// shows "?" and says why below.
			rctx, rcancel := context.WithTimeout(ctx, ratesTimeout)
			rates, ratesErr := cc.taskRates(rctx, args[0])
			rcancel()
			var rows [][]string
			for _, t := range resp.GetTasks() {
				in, out, bp := "?", "?", "?"
				if r, ok := rates[taskKey{int(t.GetId().GetVertexId()), int(t.GetId().GetSubtask())}]; ok {
					in, out, bp = fmtRate(r.RecordsInPerSec), fmtRate(r.RecordsOutPerSec), fmt.Sprintf("%.0f%%", 100*r.Backpressure)
				}
				rows = append(rows, []string{t.GetName(), taskState(t.GetState()), t.GetTaskmanagerId(),
					fmt.Sprint(t.GetRecordsIn()), fmt.Sprint(t.GetRecordsOut()), in, out, bp, t.GetError()})
			}
			if err := table(w, "TASK\tSTATE\tTASKMANAGER\tRECORDS IN\tRECORDS OUT\tIN/S\tOUT/S\tBACKPRESSURE\tERROR", rows); err != nil {
				return err
			}
			if ratesErr != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "rates unavailable: %v\n", ratesErr)
			}
			return nil
		},
	}
	statusCmd.Flags().BoolVar(&wait, "wait", false, "wait until the job ends; exit non-zero unless it finished")
	cmd.AddCommand(statusCmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a job",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, ctx, done, err := cc.connect(cmd)
			if err != nil {
				return err
			}
			defer done()
			if _, err := client.CancelJob(ctx, &weirpb.CancelJobRequest{JobId: args[0]}); err != nil {
				return cc.callErr("cancel job "+args[0], err)
			}
			if cc.output == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]string{"jobId": args[0], "state": "canceling"})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cancelling job %s\n", args[0])
			return nil
		},
	})
	return cmd
}

func newTaskManagersCommand(cc *clientConfig) *cobra.Command {
	cmd := &cobra.Command{Use: "taskmanagers", Short: "Show the cluster's taskmanagers"}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List taskmanagers with their slots and last heartbeat",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, ctx, done, err := cc.connect(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := client.ListTaskManagers(ctx, &weirpb.ListTaskManagersRequest{})
			if err != nil {
				return cc.callErr("list taskmanagers", err)
			}
			if cc.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			var rows [][]string
			for _, t := range resp.GetTaskmanagers() {
				state := "lost"
				switch {
				case t.GetLive() && t.GetSuspected():
					state = "suspected"
				case t.GetLive():
					state = "live"
				}
				used := t.GetSlotsTotal() - t.GetSlotsFree()
				rows = append(rows, []string{t.GetTaskmanagerId(), t.GetAddress(), state,
					fmt.Sprint(used), fmt.Sprint(t.GetSlotsFree()), fmtTime(t.GetLastHeartbeatMs())})
			}
			return table(cmd.OutOrStdout(), "ID\tADDRESS\tSTATE\tSLOTS USED\tSLOTS FREE\tLAST HEARTBEAT", rows)
		},
	})
	return cmd
}
