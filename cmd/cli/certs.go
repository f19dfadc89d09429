package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/security"
)

// newCertsCommand is `weir certs`: development certificates.
func newCertsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Manage the cluster's TLS certificates",
	}
	var opts security.CertOptions
	initCmd := &cobra.Command{
		Use:   "init DIR",
		Short: "Create a development CA and certificates for every role in DIR",
		Long: "init creates DIR (mode 0700) with a new CA (ca.pem) and, signed by it, certificates for the\n" +
			"jobmanager (jobmanager.pem), each taskmanager (taskmanager-<id>.pem, bound to that id), an operator\n" +
			"(operator.pem: submit, cancel, trigger, read) and a reader (reader.pem: read only), each with its\n" +
			"key (<name>-key.pem, mode 0600). It never overwrites a file. Give each process --tls-ca DIR/ca.pem\n" +
			"and its own --tls-cert and --tls-key. For production, issue certificates from your own CA with the\n" +
			"same subjects: common name = the holder (a taskmanager's id), organizational unit = its role.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := security.InitCerts(args[0], opts)
			if err != nil {
				return fmt.Errorf("certs init: %w", err)
			}
			for _, f := range files {
				fmt.Fprintln(cmd.OutOrStdout(), f)
			}
			return nil
		},
	}
	f := initCmd.Flags()
	f.StringSliceVar(&opts.TaskManagers, "taskmanagers", []string{"tm-1", "tm-2", "tm-3"}, "taskmanager ids to issue certificates for")
	f.StringSliceVar(&opts.Hosts, "hosts", nil, "extra host names and IP addresses for the certificates (besides localhost, 127.0.0.1, ::1)")
	f.DurationVar(&opts.Validity, "validity", 0, "how long the certificates are valid (default one year; the CA ten times as long)")
	cmd.AddCommand(initCmd)
	return cmd
}
