package kubernetes

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/weirstream/weir/cmd/cli"
)

// The manifests are checked without a cluster and without kustomize: each
// document is decoded strictly (unknown fields are errors) into the
// k8s.io/api type of its apiVersion and kind, and the references between
// objects — the Kubernetes API server and kustomize would accept most
// broken ones silently — are resolved by hand.

// object is one document of a manifest file.
type object struct {
	file string // relative to this directory
	kind string // apiVersion/kind: "apps/v1/StatefulSet"
	name string
	obj  any // *appsv1.StatefulSet, *corev1.Service, ...
}

func (o object) String() string { return fmt.Sprintf("%s %s (%s)", o.kind, o.name, o.file) }

// kinds are the object types the manifests may hold.
var kinds = map[string]func() any{
	"apps/v1/StatefulSet":           func() any { return new(appsv1.StatefulSet) },
	"apps/v1/Deployment":            func() any { return new(appsv1.Deployment) },
	"v1/Service":                    func() any { return new(corev1.Service) },
	"v1/ConfigMap":                  func() any { return new(corev1.ConfigMap) },
	"v1/Secret":                     func() any { return new(corev1.Secret) },
	"v1/Namespace":                  func() any { return new(corev1.Namespace) },
	"policy/v1/PodDisruptionBudget": func() any { return new(policyv1.PodDisruptionBudget) },
}

// kustomization is the subset of kustomize's Kustomization the manifests
// use; anything else is an unknown field.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors,omitempty"`
		IncludeTemplates bool              `json:"includeTemplates,omitempty"`
	} `json:"labels,omitempty"`
	Resources []string `json:"resources,omitempty"`
	Patches   []struct {
		Path string `json:"path"`
	} `json:"patches,omitempty"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images,omitempty"`
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocuments returns the YAML documents of data, without those that
// hold only comments.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range docSeparator.Split(string(data), -1) {
		for _, line := range strings.Split(d, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				docs = append(docs, []byte(d))
				break
			}
		}
	}
	return docs
}

// decodeDocument decodes one document strictly into the type of its kind.
func decodeDocument(data []byte) (object, error) {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return object{}, err
	}
	kind := meta.APIVersion + "/" + meta.Kind
	newObj, ok := kinds[kind]
	if !ok {
		return object{}, fmt.Errorf("unknown kind %q (apiVersion %q); the checks know %v", meta.Kind, meta.APIVersion, slices.Sorted(maps.Keys(kinds)))
	}
	if meta.Metadata.Name == "" {
		return object{}, fmt.Errorf("%s without metadata.name", kind)
	}
	obj := newObj()
	if err := yaml.UnmarshalStrict(data, obj); err != nil {
		return object{}, fmt.Errorf("%s %s: %w", kind, meta.Metadata.Name, err)
	}
	return object{kind: kind, name: meta.Metadata.Name, obj: obj}, nil
}

// loadObjects decodes every document of the manifest file at path.
func loadObjects(path string) ([]object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []object
	for i, d := range splitDocuments(data) {
		o, err := decodeDocument(d)
		if err != nil {
			return nil, fmt.Errorf("%s, document %d: %w", path, i+1, err)
		}
		o.file = path
		objs = append(objs, o)
	}
	return objs, nil
}

// loadKustomization decodes dir/kustomization.yaml strictly.
func loadKustomization(dir string) (kustomization, error) {
	var k kustomization
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return k, err
	}
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return k, fmt.Errorf("%s/kustomization.yaml: %w", dir, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		return k, fmt.Errorf("%s/kustomization.yaml: apiVersion %q kind %q; want kustomize.config.k8s.io/v1beta1 Kustomization", dir, k.APIVersion, k.Kind)
	}
	return k, nil
}

// loadBase loads the objects of base/ through its kustomization and checks
// that every YAML file there is one of its resources.
func loadBase(t *testing.T) []object {
	t.Helper()
	k, err := loadKustomization("base")
	if err != nil {
		t.Fatal(err)
	}
	var objs []object
	for _, r := range k.Resources {
		o, err := loadObjects(filepath.Join("base", r))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o...)
	}
	files, _ := filepath.Glob(filepath.Join("base", "*.y*ml"))
	for _, f := range files {
		if name := filepath.Base(f); name != "kustomization.yaml" && !slices.Contains(k.Resources, name) {
			t.Errorf("%s is not listed in base/kustomization.yaml resources, so kustomize ignores it", f)
		}
	}
	if len(objs) == 0 {
		t.Fatal("base/ holds no objects")
	}
	return objs
}

func find(objs []object, kind, name string) (object, bool) {
	for _, o := range objs {
		if o.kind == kind && o.name == name {
			return o, true
		}
	}
	return object{}, false
}

// workload is an object with a pod template.
type workload struct {
	object
	replicas    int32
	selector    map[string]string
	pod         *corev1.PodTemplateSpec
	serviceName string
	claims      []string // volumeClaimTemplates' names
}

func workloads(objs []object) []workload {
	var out []workload
	for _, o := range objs {
		switch x := o.obj.(type) {
		case *appsv1.StatefulSet:
			w := workload{object: o, replicas: 1, pod: &x.Spec.Template, serviceName: x.Spec.ServiceName}
			if x.Spec.Replicas != nil {
				w.replicas = *x.Spec.Replicas
			}
			if x.Spec.Selector != nil {
				w.selector = x.Spec.Selector.MatchLabels
			}
			for _, c := range x.Spec.VolumeClaimTemplates {
				w.claims = append(w.claims, c.Name)
			}
			out = append(out, w)
		case *appsv1.Deployment:
			w := workload{object: o, replicas: 1, pod: &x.Spec.Template}
			if x.Spec.Replicas != nil {
				w.replicas = *x.Spec.Replicas
			}
			if x.Spec.Selector != nil {
				w.selector = x.Spec.Selector.MatchLabels
			}
			out = append(out, w)
		}
	}
	return out
}

// selects reports whether every label of selector is on labels; an empty
// selector selects nothing here (it would select every pod).
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// selected returns the workloads whose pods selector picks.
func selected(objs []object, selector map[string]string) []workload {
	var out []workload
	for _, w := range workloads(objs) {
		if selects(selector, w.pod.Labels) {
			out = append(out, w)
		}
	}
	return out
}

// portIn reports whether p names or numbers one of the container's ports.
func portIn(p intstr.IntOrString, c *corev1.Container) bool {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && p.StrVal == cp.Name) || (p.Type == intstr.Int && p.IntVal == cp.ContainerPort) {
			return true
		}
	}
	return false
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkBase resolves the references between the base's objects and checks
// what every pod must have; it returns every problem found.
func checkBase(objs []object) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	seen := make(map[string]bool)
	for _, o := range objs {
		if seen[o.kind+"/"+o.name] {
			fail("%s is defined twice", o)
		}
		seen[o.kind+"/"+o.name] = true
	}
	configMap := func(name string) *corev1.ConfigMap {
		if o, ok := find(objs, "v1/ConfigMap", name); ok {
			return o.obj.(*corev1.ConfigMap)
		}
		return nil
	}
	secretExists := func(name string) bool { _, ok := find(objs, "v1/Secret", name); return ok }

	for _, w := range workloads(objs) {
		if !selects(w.selector, w.pod.Labels) {
			fail("%s: its selector %v does not match its pod template's labels %v", w, w.selector, w.pod.Labels)
		}
		if w.kind == "apps/v1/StatefulSet" {
			svc, ok := find(objs, "v1/Service", w.serviceName)
			if !ok {
				fail("%s: serviceName %q names no Service", w, w.serviceName)
			} else if svc.obj.(*corev1.Service).Spec.ClusterIP != corev1.ClusterIPNone {
				fail("%s: its serviceName %q is not a headless Service (clusterIP: None), so its pods get no stable names", w, w.serviceName)
			}
		}
		spec := &w.pod.Spec
		volumes := make(map[string]*corev1.Volume)
		for i := range spec.Volumes {
			v := &spec.Volumes[i]
			volumes[v.Name] = v
			switch {
			case v.ConfigMap != nil:
				cm := configMap(v.ConfigMap.Name)
				if cm == nil {
					fail("%s: volume %s: ConfigMap %q is not in the base", w, v.Name, v.ConfigMap.Name)
					continue
				}
				for _, it := range v.ConfigMap.Items {
					if _, ok := cm.Data[it.Key]; !ok {
						fail("%s: volume %s: ConfigMap %s has no key %q", w, v.Name, cm.Name, it.Key)
					}
				}
			case v.Secret != nil:
				if !secretExists(v.Secret.SecretName) {
					fail("%s: volume %s: Secret %q is not in the base", w, v.Name, v.Secret.SecretName)
				}
			}
		}
		podNonRoot := spec.SecurityContext != nil && spec.SecurityContext.RunAsNonRoot != nil && *spec.SecurityContext.RunAsNonRoot
		for i := range spec.Containers {
			c := &spec.Containers[i]
			where := fmt.Sprintf("%s container %s", w, c.Name)
			if c.Image == "" {
				fail("%s: no image", where)
			}
			env := make(map[string]bool)
			for _, e := range c.Env {
				env[e.Name] = true
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && !secretExists(e.ValueFrom.SecretKeyRef.Name) {
					fail("%s: env %s: Secret %q is not in the base", where, e.Name, e.ValueFrom.SecretKeyRef.Name)
				}
				if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil && configMap(e.ValueFrom.ConfigMapKeyRef.Name) == nil {
					fail("%s: env %s: ConfigMap %q is not in the base", where, e.Name, e.ValueFrom.ConfigMapKeyRef.Name)
				}
			}
			for _, e := range c.EnvFrom {
				if e.SecretRef != nil && !secretExists(e.SecretRef.Name) {
					fail("%s: envFrom: Secret %q is not in the base", where, e.SecretRef.Name)
				}
				if e.ConfigMapRef != nil && configMap(e.ConfigMapRef.Name) == nil {
					fail("%s: envFrom: ConfigMap %q is not in the base", where, e.ConfigMapRef.Name)
				}
			}
			// Kubernetes leaves an undefined $(VAR) in place, silently.
			for _, a := range slices.Concat(c.Command, c.Args) {
				for _, m := range envRef.FindAllStringSubmatch(a, -1) {
					if !env[m[1]] {
						fail("%s: argument %q refers to $(%s), which is not in the container's env", where, a, m[1])
					}
				}
			}
			for _, m := range c.VolumeMounts {
				if volumes[m.Name] == nil && !slices.Contains(w.claims, m.Name) {
					fail("%s: volumeMount %s names no volume", where, m.Name)
				}
			}
			for _, p := range []struct {
				name  string
				probe *corev1.Probe
			}{{"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}} {
				if p.probe == nil {
					fail("%s: no %s", where, p.name)
					continue
				}
				switch h := p.probe.ProbeHandler; {
				case h.TCPSocket != nil:
					if !portIn(h.TCPSocket.Port, c) {
						fail("%s: %s port %s is not a port of the container", where, p.name, h.TCPSocket.Port.String())
					}
				case h.HTTPGet != nil:
					if !portIn(h.HTTPGet.Port, c) {
						fail("%s: %s port %s is not a port of the container", where, p.name, h.HTTPGet.Port.String())
					}
				case h.GRPC != nil:
					if !portIn(intstr.FromInt32(h.GRPC.Port), c) {
						fail("%s: %s port %d is not a port of the container", where, p.name, h.GRPC.Port)
					}
				case h.Exec != nil:
					if len(h.Exec.Command) == 0 {
						fail("%s: %s exec has no command", where, p.name)
					}
				default:
					fail("%s: %s has no handler", where, p.name)
				}
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				fail("%s: set resource requests (cpu, memory) and a memory limit", where)
			}
			sc := c.SecurityContext
			nonRoot := podNonRoot || (sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot)
			if !nonRoot {
				fail("%s: not runAsNonRoot", where)
			}
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				fail("%s: want readOnlyRootFilesystem: true and allowPrivilegeEscalation: false", where)
			}
		}
	}

	for _, o := range objs {
		switch x := o.obj.(type) {
		case *corev1.Service:
			pods := selected(objs, x.Spec.Selector)
			if len(pods) == 0 {
				fail("%s: selector %v matches no pod template", o, x.Spec.Selector)
				continue
			}
			for _, p := range x.Spec.Ports {
				target := p.TargetPort
				if target.Type == intstr.Int && target.IntVal == 0 {
					target = intstr.FromInt32(p.Port)
				}
				for _, w := range pods {
					found := false
					for i := range w.pod.Spec.Containers {
						found = found || portIn(target, &w.pod.Spec.Containers[i])
					}
					if !found {
						fail("%s: port %s targets %s, which no container of %s has", o, p.Name, target.String(), w)
					}
				}
			}
		case *policyv1.PodDisruptionBudget:
			if x.Spec.Selector == nil || len(selected(objs, x.Spec.Selector.MatchLabels)) == 0 {
				fail("%s: its selector matches no pod template", o)
			}
		}
	}
	for _, w := range workloads(objs) {
		covered := false
		for _, o := range objs {
			if pdb, ok := o.obj.(*policyv1.PodDisruptionBudget); ok && pdb.Spec.Selector != nil && selects(pdb.Spec.Selector.MatchLabels, w.pod.Labels) {
				covered = true
			}
		}
		if !covered {
			fail("%s: no PodDisruptionBudget selects its pods", w)
		}
	}
	return errs
}

// podEnv is what the checks substitute for $(VAR) in container arguments:
// the values the downward API gives pod 0 of the workload.
func podEnv(w workload, c *corev1.Container) map[string]string {
	env := make(map[string]string)
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				env[e.Name] = w.name + "-0"
			case "metadata.namespace":
				env[e.Name] = "weir"
			case "status.podIP":
				env[e.Name] = "10.1.2.3"
			}
		}
	}
	return env
}

// mountOf returns the volume mounted where file lies, and file's path
// inside it.
func mountOf(w workload, c *corev1.Container, file string) (*corev1.Volume, corev1.VolumeMount, string, bool) {
	for _, m := range c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, file)
		if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
			continue
		}
		if m.SubPath != "" {
			continue
		}
		for i := range w.pod.Spec.Volumes {
			if v := &w.pod.Spec.Volumes[i]; v.Name == m.Name {
				return v, m, rel, true
			}
		}
		if slices.Contains(w.claims, m.Name) {
			return nil, m, rel, true
		}
	}
	return nil, corev1.VolumeMount{}, "", false
}

// itemKey returns the ConfigMap or Secret key that appears at rel in a
// volume with items (or, without items, rel itself).
func itemKey(items []corev1.KeyToPath, rel string) (string, bool) {
	if len(items) == 0 {
		return rel, true
	}
	for _, it := range items {
		if it.Path == rel {
			return it.Key, true
		}
	}
	return "", false
}

// processSettings is what the cross-process checks compare.
type processSettings struct {
	where        string
	haEndpoints  []string
	haPrefix     string
	listenPorts  []string
	tlsFiles     []string
	writableDirs []string
}

// checkProcessConfigs loads the config of every jobmanager and taskmanager
// container the way the binary would — its arguments (with $(VAR)
// substituted) through the real flags, the --config file from the
// ConfigMap through the real loader — validates it, and checks that the
// files and ports it names exist in the pod. dir receives the config
// files.
func checkProcessConfigs(objs []object, dir string) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	var all []processSettings
	for _, w := range workloads(objs) {
		for i := range w.pod.Spec.Containers {
			c := &w.pod.Spec.Containers[i]
			if len(c.Command) == 0 {
				continue
			}
			binary := path.Base(c.Command[0])
			if binary != "jobmanager" && binary != "taskmanager" {
				continue
			}
			where := fmt.Sprintf("%s container %s", w, c.Name)
			env := podEnv(w, c)
			args := make([]string, len(c.Args))
			for j, a := range c.Args {
				args[j] = envRef.ReplaceAllStringFunc(a, func(ref string) string { return env[ref[2:len(ref)-1]] })
			}
			configAt := -1
			for j, a := range args {
				if strings.HasPrefix(a, "--config=") {
					configAt = j
				}
			}
			if configAt < 0 {
				fail("%s: no --config=FILE argument", where)
				continue
			}
			configPath := strings.TrimPrefix(args[configAt], "--config=")
			v, _, rel, ok := mountOf(w, c, configPath)
			if !ok || v == nil || v.ConfigMap == nil {
				fail("%s: --config %s is not in a mounted ConfigMap", where, configPath)
				continue
			}
			key, ok := itemKey(v.ConfigMap.Items, rel)
			cmObj, found := find(objs, "v1/ConfigMap", v.ConfigMap.Name)
			if !ok || !found {
				fail("%s: --config %s: no such key in ConfigMap %s", where, configPath, v.ConfigMap.Name)
				continue
			}
			text, ok := cmObj.obj.(*corev1.ConfigMap).Data[key]
			if !ok {
				fail("%s: --config %s: ConfigMap %s has no key %q", where, configPath, v.ConfigMap.Name, key)
				continue
			}
			local := filepath.Join(dir, w.name+"-"+key)
			if err := os.WriteFile(local, []byte(text), 0o600); err != nil {
				fail("%v", err)
				continue
			}
			args[configAt] = "--config=" + local

			var s processSettings
			s.where = where
			switch binary {
			case "jobmanager":
				cfg, err := cli.JobManagerConfig(args)
				if err == nil {
					err = cfg.Validate()
				}
				if err != nil {
					fail("%s: the jobmanager rejects its arguments and ConfigMap %s key %s: %v", where, v.ConfigMap.Name, key, err)
					continue
				}
				if cfg.HA.Mode != "etcd" || cfg.HA.AdvertisedAddress == "" {
					fail("%s: ha mode %q, advertised address %q; the jobmanagers must run ha: etcd and advertise a reachable address", where, cfg.HA.Mode, cfg.HA.AdvertisedAddress)
				}
				s.haEndpoints, s.haPrefix = cfg.HA.Endpoints, cfg.HA.Prefix
				s.listenPorts = []string{cfg.RPCAddress, cfg.RESTAddress}
				s.tlsFiles = []string{cfg.TLS.CAFile, cfg.TLS.CertFile, cfg.TLS.KeyFile, cfg.HA.EtcdTLS.CAFile, cfg.HA.EtcdTLS.CertFile, cfg.HA.EtcdTLS.KeyFile}
			case "taskmanager":
				cfg, err := cli.TaskManagerConfig(args)
				if err == nil {
					err = cfg.Validate()
				}
				if err != nil {
					fail("%s: the taskmanager rejects its arguments and ConfigMap %s key %s: %v", where, v.ConfigMap.Name, key, err)
					continue
				}
				if cfg.HA.Mode != "etcd" {
					fail("%s: ha mode %q; the taskmanagers must find the leader through etcd", where, cfg.HA.Mode)
				}
				if cfg.StateDir == "" {
					fail("%s: no stateDir; the default is a temporary directory, not the pod's volume", where)
				}
				s.haEndpoints, s.haPrefix = cfg.HA.Endpoints, cfg.HA.Prefix
				s.listenPorts = []string{cfg.RPCAddress, cfg.ExchangeAddress, cfg.MetricsAddress}
				s.tlsFiles = []string{cfg.TLS.CAFile, cfg.TLS.CertFile, cfg.TLS.KeyFile, cfg.HA.EtcdTLS.CAFile, cfg.HA.EtcdTLS.CertFile, cfg.HA.EtcdTLS.KeyFile}
				s.writableDirs = append([]string{cfg.StateDir}, cfg.AllowedPaths...)
			}
			for _, addr := range s.listenPorts {
				_, port, err := net.SplitHostPort(addr)
				if err != nil || port == "0" {
					fail("%s: listen address %q: want host:port with a fixed port", where, addr)
					continue
				}
				if !portIn(intstr.Parse(port), c) {
					fail("%s: listens on %s, but the container declares no port %s", where, addr, port)
				}
			}
			for _, f := range s.tlsFiles {
				if f == "" {
					fail("%s: TLS is off (a certificate file is empty); the manifests are secure by default", where)
					continue
				}
				v, _, rel, ok := mountOf(w, c, f)
				if !ok || v == nil || v.Secret == nil {
					fail("%s: %s is not in a mounted Secret", where, f)
					continue
				}
				if _, ok := itemKey(v.Secret.Items, rel); !ok {
					fail("%s: %s: Secret volume %s does not project %s", where, f, v.Name, rel)
				}
			}
			for _, d := range s.writableDirs {
				v, m, _, ok := mountOf(w, c, d)
				if !ok || m.ReadOnly || (v != nil && v.EmptyDir == nil && v.PersistentVolumeClaim == nil) {
					fail("%s: %s is not on a writable volume (the root filesystem is read-only)", where, d)
				}
			}
			all = append(all, s)
		}
	}
	if len(all) < 2 {
		fail("found %d jobmanager/taskmanager containers; want both kinds", len(all))
		return errs
	}
	for _, s := range all[1:] {
		if s.haPrefix != all[0].haPrefix || !slices.Equal(s.haEndpoints, all[0].haEndpoints) {
			fail("%s: ha prefix %q endpoints %v differ from %s's %q %v", s.where, s.haPrefix, s.haEndpoints, all[0].where, all[0].haPrefix, all[0].haEndpoints)
		}
	}
	errs = append(errs, checkEtcdEndpoints(objs, all[0].haEndpoints)...)
	return errs
}

// checkEtcdEndpoints checks that every endpoint is https and names a
// member of an etcd StatefulSet (pod.service) on a port of its Service.
func checkEtcdEndpoints(objs []object, endpoints []string) []error {
	var errs []error
	for _, e := range endpoints {
		rest, ok := strings.CutPrefix(e, "https://")
		if !ok {
			errs = append(errs, fmt.Errorf("etcd endpoint %q: want https:// (etcd speaks TLS here)", e))
			continue
		}
		host, port, err := net.SplitHostPort(rest)
		pod, svcName, _ := strings.Cut(host, ".")
		svc, found := find(objs, "v1/Service", svcName)
		if err != nil || !found {
			errs = append(errs, fmt.Errorf("etcd endpoint %q: want https://POD.SERVICE:PORT with a Service of the base", e))
			continue
		}
		member := false
		for _, w := range workloads(objs) {
			for n := range w.replicas {
				member = member || (w.serviceName == svcName && pod == fmt.Sprintf("%s-%d", w.name, n))
			}
		}
		if !member {
			errs = append(errs, fmt.Errorf("etcd endpoint %q: %s is not a pod of a StatefulSet governed by Service %s", e, pod, svcName))
		}
		if !slices.ContainsFunc(svc.obj.(*corev1.Service).Spec.Ports, func(p corev1.ServicePort) bool { return fmt.Sprint(p.Port) == port }) {
			errs = append(errs, fmt.Errorf("etcd endpoint %q: Service %s has no port %s", e, svcName, port))
		}
	}
	return errs
}

// checkOverlay checks an overlay's kustomization: its resources exist and
// every patch decodes strictly and patches an object of the base (and, for
// workloads, only containers the base has: a misnamed one would be added
// as a new container without an image).
func checkOverlay(dir string, base []object) []error {
	var errs []error
	k, err := loadKustomization(dir)
	if err != nil {
		return []error{err}
	}
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		st, err := os.Stat(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: resource %s: %w", dir, r, err))
			continue
		}
		if st.IsDir() {
			if _, err := os.Stat(filepath.Join(p, "kustomization.yaml")); err != nil {
				errs = append(errs, fmt.Errorf("%s: resource %s is a directory without a kustomization.yaml", dir, r))
			}
		}
	}
	var listed []string
	for _, p := range k.Patches {
		if p.Path == "" {
			errs = append(errs, fmt.Errorf("%s: a patch without path (inline patches are not checked; use a file)", dir))
			continue
		}
		listed = append(listed, p.Path)
		objs, err := loadObjects(filepath.Join(dir, p.Path))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, o := range objs {
			target, ok := find(base, o.kind, o.name)
			if !ok {
				errs = append(errs, fmt.Errorf("%s: patches %s %s, which the base does not have", o.file, o.kind, o.name))
				continue
			}
			pw, tw := workloads([]object{o}), workloads([]object{target})
			if len(pw) == 1 && len(tw) == 1 {
				for _, c := range pw[0].pod.Spec.Containers {
					if !slices.ContainsFunc(tw[0].pod.Spec.Containers, func(b corev1.Container) bool { return b.Name == c.Name }) {
						errs = append(errs, fmt.Errorf("%s: patches container %q, which %s does not have", o.file, c.Name, target))
					}
				}
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.y*ml"))
	for _, f := range files {
		if name := filepath.Base(f); name != "kustomization.yaml" && !slices.Contains(listed, name) && !slices.Contains(k.Resources, name) {
			errs = append(errs, fmt.Errorf("%s is neither a resource nor a patch of %s/kustomization.yaml", f, dir))
		}
	}
	return errs
}

func report(t *testing.T, errs []error) {
	t.Helper()
	for _, err := range errs {
		t.Error(err)
	}
}

// TestManifests decodes every manifest strictly and resolves every
// reference: the base's objects, the overlays' patches, and the process
// configs in the ConfigMap against the binaries' loaders.
func TestManifests(t *testing.T) {
	base := loadBase(t)
	counts := make(map[string]int)
	for _, o := range base {
		counts[o.kind]++
	}
	t.Logf("base: %d objects %v", len(base), counts)
	t.Run("base", func(t *testing.T) { report(t, checkBase(base)) })
	t.Run("configs", func(t *testing.T) { report(t, checkProcessConfigs(base, t.TempDir())) })
	overlays, _ := filepath.Glob(filepath.Join("overlays", "*"))
	if len(overlays) < 2 {
		t.Fatalf("found overlays %v; want dev and production", overlays)
	}
	for _, dir := range overlays {
		t.Run(dir, func(t *testing.T) { report(t, checkOverlay(dir, base)) })
	}
	t.Run("etcd has three members", func(t *testing.T) {
		o, ok := find(base, "apps/v1/StatefulSet", "weir-etcd")
		if !ok || *o.obj.(*appsv1.StatefulSet).Spec.Replicas != 3 {
			t.Fatal("want StatefulSet weir-etcd with 3 replicas")
		}
	})
}

// TestChecksCatch feeds the checks broken manifests: each must be reported.
func TestChecksCatch(t *testing.T) {
	t.Run("unknown field", func(t *testing.T) {
		_, err := decodeDocument([]byte("apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: x\nspec:\n  replica: 3\n"))
		if err == nil || !strings.Contains(err.Error(), "replica") {
			t.Fatalf("a misspelt field decoded: %v", err)
		}
	})
	t.Run("unknown kind", func(t *testing.T) {
		_, err := decodeDocument([]byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n"))
		if err == nil {
			t.Fatal("an unchecked kind decoded")
		}
	})
	mutations := []struct {
		name   string
		mutate func(objs []object)
		check  func(objs []object, dir string) []error
		want   string
	}{
		{"service selects nothing", func(objs []object) {
			svc, _ := find(objs, "v1/Service", "weir-jobmanager")
			svc.obj.(*corev1.Service).Spec.Selector = map[string]string{"app.kubernetes.io/name": "weir-jobmanagr"}
		}, withoutDir(checkBase), "matches no pod template"},
		{"probe port unknown", func(objs []object) {
			sts, _ := find(objs, "apps/v1/StatefulSet", "weir-taskmanager")
			sts.obj.(*appsv1.StatefulSet).Spec.Template.Spec.Containers[0].LivenessProbe.TCPSocket.Port = intstr.FromString("rcp")
		}, withoutDir(checkBase), "livenessProbe port rcp"},
		{"secret missing", func(objs []object) {
			sts, _ := find(objs, "apps/v1/StatefulSet", "weir-jobmanager")
			for i := range sts.obj.(*appsv1.StatefulSet).Spec.Template.Spec.Volumes {
				if v := &sts.obj.(*appsv1.StatefulSet).Spec.Template.Spec.Volumes[i]; v.Secret != nil {
					v.Secret.SecretName = "weir-tls-jobmanagers"
				}
			}
		}, withoutDir(checkBase), `Secret "weir-tls-jobmanagers" is not in the base`},
		{"undefined variable in args", func(objs []object) {
			sts, _ := find(objs, "apps/v1/StatefulSet", "weir-taskmanager")
			c := &sts.obj.(*appsv1.StatefulSet).Spec.Template.Spec.Containers[0]
			c.Args = append(c.Args, "--exchange-advertise-address=$(NODE_NAME):6125")
		}, withoutDir(checkBase), "$(NODE_NAME)"},
		{"config key misspelt", func(objs []object) {
			cm, _ := find(objs, "v1/ConfigMap", "weir-config")
			data := cm.obj.(*corev1.ConfigMap).Data
			data["jobmanager.yaml"] = strings.Replace(data["jobmanager.yaml"], "slotWaitTimeout:", "slotWaitTimout:", 1)
		}, checkProcessConfigs, "unknown key"},
		{"flag misspelt", func(objs []object) {
			sts, _ := find(objs, "apps/v1/StatefulSet", "weir-taskmanager")
			c := &sts.obj.(*appsv1.StatefulSet).Spec.Template.Spec.Containers[0]
			c.Args = append(c.Args, "--advertised-address=x:1")
		}, checkProcessConfigs, "advertised-address"},
		{"config invalid", func(objs []object) {
			cm, _ := find(objs, "v1/ConfigMap", "weir-config")
			data := cm.obj.(*corev1.ConfigMap).Data
			data["taskmanager.yaml"] = strings.Replace(data["taskmanager.yaml"], "slots: 4", "slots: -1", 1)
		}, checkProcessConfigs, "slots"},
		{"port not declared", func(objs []object) {
			cm, _ := find(objs, "v1/ConfigMap", "weir-config")
			data := cm.obj.(*corev1.ConfigMap).Data
			data["jobmanager.yaml"] = strings.Replace(data["jobmanager.yaml"], "0.0.0.0:8081", "0.0.0.0:8082", 1)
		}, checkProcessConfigs, "declares no port 8082"},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			objs := loadBase(t)
			if errs := m.check(objs, t.TempDir()); len(errs) != 0 {
				t.Fatalf("the unbroken base fails: %v", errs)
			}
			m.mutate(objs)
			errs := m.check(objs, t.TempDir())
			for _, err := range errs {
				if strings.Contains(err.Error(), m.want) {
					t.Logf("caught: %v", err)
					return
				}
			}
			t.Fatalf("want an error containing %q, got %v", m.want, errs)
		})
	}
	t.Run("patch of a missing object", func(t *testing.T) {
		dir := t.TempDir()
		write := func(name, text string) {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		write("kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../base]\npatches:\n  - path: p.yaml\n")
		write("p.yaml", "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: weir-taskmanagers\nspec:\n  replicas: 2\n")
		// From a temporary directory ../base is missing too.
		errs := checkOverlay(dir, loadBase(t))
		if !slices.ContainsFunc(errs, func(err error) bool {
			return strings.Contains(err.Error(), "weir-taskmanagers, which the base does not have")
		}) {
			t.Fatalf("want the patch of a missing StatefulSet reported, got %v", errs)
		}
		t.Logf("caught: %v", errs)
	})
}

func withoutDir(f func([]object) []error) func([]object, string) []error {
	return func(objs []object, _ string) []error { return f(objs) }
}

// TestDockerfile checks that the image the manifests run holds the
// binaries they start, built static.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, want := range []string{"FROM golang:1.26", "CGO_ENABLED=0", "./cmd/jobmanager", "./cmd/taskmanager", "./cmd/weir",
		"-X github.com/weirstream/weir/cmd/cli.Version=", "/usr/local/bin/"} {
		if !strings.Contains(text, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if !regexp.MustCompile(`(?m)^FROM (gcr.io/distroless/static\S*|scratch)\s*$`).MatchString(text) {
		t.Error("the Dockerfile's final stage is not distroless/static or scratch")
	}
	for _, w := range workloads(loadBase(t)) {
		for _, c := range w.pod.Spec.Containers {
			if strings.HasPrefix(c.Image, "ghcr.io/weirstream/weir") {
				if len(c.Command) == 0 || !strings.HasPrefix(c.Command[0], "/usr/local/bin/") || !strings.Contains(text, "./cmd/"+path.Base(c.Command[0])) {
					t.Errorf("%s container %s: command %v is not a binary the Dockerfile builds into /usr/local/bin", w, c.Name, c.Command)
				}
			}
		}
	}
}

// TestStaticBuild builds the three binaries as the Dockerfile does
// (CGO_ENABLED=0, version set by -ldflags) and runs their version
// commands. It runs only with WEIR_TEST_STATIC_BUILD=1: with a cold build
// cache (CGO_ENABLED=0 shares nothing with the usual build) it takes
// minutes on a small machine, about 15 s with a warm one.
func TestStaticBuild(t *testing.T) {
	if os.Getenv("WEIR_TEST_STATIC_BUILD") != "1" {
		t.Skip("set WEIR_TEST_STATIC_BUILD=1 to build the binaries with CGO_ENABLED=0")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	out := t.TempDir()
	const version = "v0.0.0-k8stest"
	build := exec.CommandContext(t.Context(), goTool, "build", "-trimpath",
		"-ldflags", "-X github.com/weirstream/weir/cmd/cli.Version="+version,
		"-o", out+string(filepath.Separator), "./cmd/jobmanager", "./cmd/taskmanager", "./cmd/weir")
	build.Dir = filepath.Join("..", "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	start := time.Now()
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, msg)
	}
	t.Logf("CGO_ENABLED=0 build of the three binaries: %s", time.Since(start).Round(time.Second))
	for _, name := range []string{"jobmanager", "taskmanager", "weir"} {
		bin := filepath.Join(out, name)
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(info.Settings, func(s debug.BuildSetting) bool { return s.Key == "CGO_ENABLED" && s.Value == "0" }) {
			t.Errorf("%s: not built with CGO_ENABLED=0: %v", name, info.Settings)
		}
		for _, args := range [][]string{{"--version"}, {"version"}} {
			got, err := exec.CommandContext(t.Context(), bin, args...).Output()
			if err != nil {
				t.Fatalf("%s %v: %v", name, args, err)
			}
			if want := name + " " + version + " commit "; !bytes.HasPrefix(got, []byte(want)) {
				t.Errorf("%s %v printed %q; want a line starting %q", name, args, got, want)
			}
			t.Logf("%s %v: %s", name, args, bytes.TrimSpace(got))
		}
	}
}
