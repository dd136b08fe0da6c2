// Package test validates the flashsale chart without a cluster: it renders
// the chart with helm, decodes every document strictly into the Kubernetes
// API types (an unknown field fails) and checks the chart's policies.
package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

const chartDir = ".."

var testSecrets = []string{"--set", "secrets.mysqlDSN=user:pw@tcp(mysql:3306)/flashsale", "--set", "secrets.jwtSecret=0123456789abcdef0123456789abcdef",
	"--set", "secrets.adminToken=admin-token-admin-token-admin-token", "--set", "secrets.redisPassword=pw"}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		bin = "helm"
	}
	if _, err := exec.LookPath(bin); err != nil {
		t.Fatalf("helm not found (%s): run make helm-test, which installs the pinned version", bin)
	}
	cmd := exec.Command(bin, args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if err != nil {
		return out.String() + stderr.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out.String(), nil
}

// rendered is a chart rendering, decoded.
type rendered struct {
	deployments     map[string]*appsv1.Deployment
	services        []*corev1.Service
	configMaps      []*corev1.ConfigMap
	secrets         []*corev1.Secret
	jobs            []*batchv1.Job
	pods            []*corev1.Pod
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	scaledObjects   []*scaledObject
	triggerAuths    []*triggerAuthentication
	serviceMonitors []*serviceMonitor
	networkPolicies []*networkingv1.NetworkPolicy
	prometheusRules []*prometheusRule
}

// prometheusRule is the part of monitoring.coreos.com/v1 PrometheusRule
// the chart uses; its groups are checked by Prometheus's own rule parser.
type prometheusRule struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Groups []map[string]any `json:"groups"`
	} `json:"spec"`
}

// scaledObject is the part of keda.sh/v1alpha1 ScaledObject the chart uses;
// decoding is strict, so a field the chart adds must be added here too.
type scaledObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		ScaleTargetRef struct {
			Name string `json:"name"`
		} `json:"scaleTargetRef"`
		MinReplicaCount int `json:"minReplicaCount"`
		MaxReplicaCount int `json:"maxReplicaCount"`
		PollingInterval int `json:"pollingInterval"`
		CooldownPeriod  int `json:"cooldownPeriod"`
		Triggers        []struct {
			Type              string            `json:"type"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
			} `json:"authenticationRef"`
		} `json:"triggers"`
	} `json:"spec"`
}

// triggerAuthentication is the part of keda.sh/v1alpha1
// TriggerAuthentication the chart uses.
type triggerAuthentication struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		SecretTargetRef []struct {
			Parameter string `json:"parameter"`
			Name      string `json:"name"`
			Key       string `json:"key"`
		} `json:"secretTargetRef"`
	} `json:"spec"`
}

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor the
// chart uses.
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

func strict(t *testing.T, doc []byte, into any) {
	t.Helper()
	j, err := yaml.YAMLToJSON(doc)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(into), "strict decode of:\n%s", doc)
}

func render(t *testing.T, args ...string) *rendered {
	t.Helper()
	out, err := helm(t, append([]string{"template", "rel", chartDir, "--kube-version", "1.30.0", "--namespace", "shop"}, args...)...)
	require.NoError(t, err)
	r := &rendered{deployments: map[string]*appsv1.Deployment{}}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(out, -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var head struct{ APIVersion, Kind string }
		require.NoError(t, yaml.Unmarshal([]byte(doc), &head))
		b := []byte(doc)
		switch head.APIVersion + "/" + head.Kind {
		case "apps/v1/Deployment":
			var d appsv1.Deployment
			strict(t, b, &d)
			r.deployments[d.Name] = &d
		case "v1/Service":
			var s corev1.Service
			strict(t, b, &s)
			r.services = append(r.services, &s)
		case "v1/ConfigMap":
			var c corev1.ConfigMap
			strict(t, b, &c)
			r.configMaps = append(r.configMaps, &c)
		case "v1/Secret":
			var s corev1.Secret
			strict(t, b, &s)
			r.secrets = append(r.secrets, &s)
		case "v1/ServiceAccount":
			var s corev1.ServiceAccount
			strict(t, b, &s)
		case "batch/v1/Job":
			var j batchv1.Job
			strict(t, b, &j)
			r.jobs = append(r.jobs, &j)
		case "v1/Pod":
			var p corev1.Pod
			strict(t, b, &p)
			r.pods = append(r.pods, &p)
		case "policy/v1/PodDisruptionBudget":
			var p policyv1.PodDisruptionBudget
			strict(t, b, &p)
			r.pdbs = append(r.pdbs, &p)
		case "autoscaling/v2/HorizontalPodAutoscaler":
			var h autoscalingv2.HorizontalPodAutoscaler
			strict(t, b, &h)
			r.hpas = append(r.hpas, &h)
		case "keda.sh/v1alpha1/ScaledObject":
			var s scaledObject
			strict(t, b, &s)
			r.scaledObjects = append(r.scaledObjects, &s)
		case "keda.sh/v1alpha1/TriggerAuthentication":
			var a triggerAuthentication
			strict(t, b, &a)
			r.triggerAuths = append(r.triggerAuths, &a)
		case "networking.k8s.io/v1/NetworkPolicy":
			var n networkingv1.NetworkPolicy
			strict(t, b, &n)
			r.networkPolicies = append(r.networkPolicies, &n)
		case "monitoring.coreos.com/v1/PrometheusRule":
			var p prometheusRule
			strict(t, b, &p)
			r.prometheusRules = append(r.prometheusRules, &p)
		case "monitoring.coreos.com/v1/ServiceMonitor":
			var s serviceMonitor
			strict(t, b, &s)
			r.serviceMonitors = append(r.serviceMonitors, &s)
		default:
			t.Fatalf("unexpected document %s/%s: add it to this test", head.APIVersion, head.Kind)
		}
	}
	return r
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

var valueSets = []struct {
	name string
	args []string
}{
	{"default values", testSecrets},
	{"production values", []string{"-f", filepath.Join(chartDir, "ci", "production-values.yaml")}},
	{"worker HPA", append([]string{"--set", "worker.autoscaling.enabled=true", "--set", "gateway.autoscaling.enabled=true"}, testSecrets...)},
}

func TestRenderedChartFollowsThePolicies(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			r := render(t, vs.args...)
			require.Len(t, r.deployments, 3, "gateway, worker, reaper")
			for _, role := range []string{"gateway", "worker", "reaper"} {
				require.Contains(t, r.deployments, "rel-flashsale-"+role)
			}
			for name, d := range r.deployments {
				requireSelectorMatches(t, name, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
				requirePodPolicies(t, "deployment "+name, d.Spec.Template.Spec, true)
				require.Contains(t, d.Spec.Template.Annotations, "checksum/config", name)
				require.Contains(t, d.Spec.Template.Annotations, "checksum/secret", name)
				requireMemoryLimitPassedOn(t, name, d.Spec.Template.Spec)
			}
			for _, j := range r.jobs {
				requirePodPolicies(t, "job "+j.Name, j.Spec.Template.Spec, false)
				require.Equal(t, "pre-install,pre-upgrade", j.Annotations["helm.sh/hook"], "the migration runs before new pods")
				require.Equal(t, []string{"/usr/local/bin/worker", "migrate"}, j.Spec.Template.Spec.Containers[0].Command)
			}
			for _, p := range r.pods {
				requirePodPolicies(t, "pod "+p.Name, p.Spec, false)
				require.Equal(t, "test", p.Annotations["helm.sh/hook"])
			}
			for _, s := range r.services {
				requireSelectsADeployment(t, "service "+s.Name, s.Spec.Selector, r)
			}
			for _, p := range r.pdbs {
				requireSelectsADeployment(t, "pdb "+p.Name, p.Spec.Selector.MatchLabels, r)
			}
			requireNoPlaintextSecrets(t, r)
			requireOneAutoscalerPerDeployment(t, r)
			for _, sm := range r.serviceMonitors {
				matched := 0
				for _, s := range r.services {
					if labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(s.Labels)) {
						matched++
						require.Equal(t, "ops", s.Spec.Ports[0].Name)
					}
				}
				require.Equal(t, 3, matched, "one metrics Service per role")
			}
		})
	}
}

// requireMemoryLimitPassedOn: every role learns its container's memory
// limit (FLASHSALE_MEMORY_LIMIT), from which it sets Go's soft limit.
func requireMemoryLimitPassedOn(t *testing.T, name string, spec corev1.PodSpec) {
	t.Helper()
	c := spec.Containers[0]
	for _, e := range c.Env {
		if e.Name == "FLASHSALE_MEMORY_LIMIT" {
			require.NotNil(t, e.ValueFrom, name)
			require.NotNil(t, e.ValueFrom.ResourceFieldRef, name)
			require.Equal(t, "limits.memory", e.ValueFrom.ResourceFieldRef.Resource, name)
			require.Equal(t, c.Name, e.ValueFrom.ResourceFieldRef.ContainerName, name)
			return
		}
	}
	t.Fatalf("%s: no FLASHSALE_MEMORY_LIMIT", name)
}

func requireSelectorMatches(t *testing.T, what string, selector, podLabels map[string]string) {
	t.Helper()
	require.NotEmpty(t, selector, what)
	require.True(t, labels.SelectorFromSet(selector).Matches(labels.Set(podLabels)), "%s: selector %v does not match pod labels %v", what, selector, podLabels)
}

func requireSelectsADeployment(t *testing.T, what string, selector map[string]string, r *rendered) {
	t.Helper()
	require.NotEmpty(t, selector, what)
	for _, d := range r.deployments {
		if labels.SelectorFromSet(selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			return
		}
	}
	t.Fatalf("%s: selector %v matches no Deployment's pods", what, selector)
}

func requirePodPolicies(t *testing.T, what string, spec corev1.PodSpec, probes bool) {
	t.Helper()
	psc := spec.SecurityContext
	require.NotNil(t, psc, what)
	require.True(t, psc.RunAsNonRoot != nil && *psc.RunAsNonRoot, "%s: runAsNonRoot", what)
	require.NotNil(t, psc.SeccompProfile, what)
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, psc.SeccompProfile.Type, what)
	require.False(t, spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken, "%s: no service account token is needed", what)
	require.NotEmpty(t, spec.Containers, what)
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		where := what + " container " + c.Name
		init := slices.ContainsFunc(spec.InitContainers, func(i corev1.Container) bool { return i.Name == c.Name })
		require.NotEmpty(t, c.Resources.Requests.Cpu().String(), where)
		require.False(t, c.Resources.Requests.Cpu().IsZero(), "%s: cpu request", where)
		require.False(t, c.Resources.Requests.Memory().IsZero(), "%s: memory request", where)
		require.False(t, c.Resources.Limits.Memory().IsZero(), "%s: memory limit", where)
		sc := c.SecurityContext
		require.NotNil(t, sc, where)
		require.True(t, sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "%s: read-only root filesystem", where)
		require.True(t, sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "%s: no privilege escalation", where)
		require.True(t, sc.RunAsNonRoot != nil && *sc.RunAsNonRoot, "%s: runAsNonRoot", where)
		require.NotNil(t, sc.Capabilities, where)
		require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop, where)
		require.Empty(t, sc.Capabilities.Add, where)
		require.True(t, sc.Privileged == nil || !*sc.Privileged, where)
		if probes && !init {
			require.NotNil(t, c.LivenessProbe, "%s: liveness probe", where)
			require.NotNil(t, c.ReadinessProbe, "%s: readiness probe", where)
			require.NotNil(t, c.StartupProbe, "%s: startup probe", where)
			require.Equal(t, "/livez", c.LivenessProbe.HTTPGet.Path, where)
			require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, where)
		}
	}
}

var secretLooking = regexp.MustCompile(`(?i)(SECRET|TOKEN|PASSWORD|DSN)`)

func requireNoPlaintextSecrets(t *testing.T, r *rendered) {
	t.Helper()
	check := func(what string, spec corev1.PodSpec) {
		for _, c := range spec.Containers {
			for _, e := range c.Env {
				if secretLooking.MatchString(e.Name) {
					require.Empty(t, e.Value, "%s: %s is inlined", what, e.Name)
					require.NotNil(t, e.ValueFrom, "%s: %s", what, e.Name)
					require.NotNil(t, e.ValueFrom.SecretKeyRef, "%s: %s must come from a Secret", what, e.Name)
				}
			}
		}
	}
	for n, d := range r.deployments {
		check(n, d.Spec.Template.Spec)
	}
	for _, j := range r.jobs {
		check(j.Name, j.Spec.Template.Spec)
	}
	for _, p := range r.pods {
		check(p.Name, p.Spec)
	}
	for _, c := range r.configMaps {
		for k := range c.Data {
			require.False(t, secretLooking.MatchString(k), "ConfigMap %s holds %s", c.Name, k)
		}
	}
}

func requireOneAutoscalerPerDeployment(t *testing.T, r *rendered) {
	t.Helper()
	owner := map[string]string{}
	claim := func(target, by string) {
		require.Contains(t, r.deployments, target, "%s targets a Deployment that does not exist", by)
		require.NotContains(t, owner, target, "%s and %s both scale %s", owner[target], by, target)
		owner[target] = by
		require.Nil(t, r.deployments[target].Spec.Replicas, "%s is autoscaled: the Deployment must not pin replicas", target)
	}
	for _, h := range r.hpas {
		require.Equal(t, "Deployment", h.Spec.ScaleTargetRef.Kind)
		claim(h.Spec.ScaleTargetRef.Name, "HPA "+h.Name)
	}
	for _, s := range r.scaledObjects {
		claim(s.Spec.ScaleTargetRef.Name, "ScaledObject "+s.Metadata.Name)
	}
}

func TestKEDAScalesWorkersOnEveryPartitionsBacklog(t *testing.T) {
	r := render(t, "-f", filepath.Join(chartDir, "ci", "production-values.yaml"))
	require.Len(t, r.scaledObjects, 1)
	so := r.scaledObjects[0]
	require.Equal(t, "rel-flashsale-worker", so.Spec.ScaleTargetRef.Name)
	require.Len(t, so.Spec.Triggers, 32, "one trigger per stream partition")
	for i, tr := range so.Spec.Triggers {
		require.Equal(t, "redis-streams", tr.Type)
		require.Equal(t, fmt.Sprintf("flashsale:{p%d}:orders", i), tr.Metadata["stream"])
		// KEDA's redis-streams scaler (pkg/scalers/redis_streams_scaler.go)
		// reads XLEN against streamLength only when there is no
		// consumerGroup: with one it reads the pending entries
		// (pendingEntriesCount, default 5) or the lag (lagCount).
		require.NotContains(t, tr.Metadata, "consumerGroup", "with a consumerGroup KEDA ignores streamLength")
		require.NotEmpty(t, tr.Metadata["streamLength"], "the stream's length is the backlog")
		for _, key := range []string{"lagCount", "pendingEntriesCount", "activationLagCount", "activationStreamLength"} {
			require.NotContains(t, tr.Metadata, key, "%s: not a key of the XLEN mode (or not one KEDA reads)", key)
		}
		require.Equal(t, "0", tr.Metadata["databaseIndex"])
		require.Equal(t, "FLASHSALE_REDIS_PASSWORD", tr.Metadata["passwordFromEnv"])
	}
	require.Empty(t, r.secrets, "existingSecret: the chart makes no Secret")
}

// With a Prometheus address, the workers scale on the orders waiting (the
// streams' entries each carry up to 32): one prometheus trigger over the
// release's namespace.
func TestKEDAScalesWorkersOnOrdersThroughPrometheus(t *testing.T) {
	r := render(t, "-f", filepath.Join(chartDir, "ci", "production-values.yaml"),
		"--set", "worker.keda.prometheusAddress=http://prometheus:9090", "--set-string", "worker.keda.ordersPerReplica=5000")
	require.Len(t, r.scaledObjects, 1)
	tr := r.scaledObjects[0].Spec.Triggers
	require.Len(t, tr, 1, "one trigger over every partition")
	require.Equal(t, "prometheus", tr[0].Type)
	require.Equal(t, map[string]string{"serverAddress": "http://prometheus:9090", "threshold": "5000",
		"query": `sum(max by (partition) (flashsale_stream_orders{namespace="shop"}))`}, tr[0].Metadata)
}

// The chart points every role at each kind of Redis deployment: a cluster
// over TLS with a private CA mounted, and sentinels; KEDA's triggers
// follow.
func TestRedisDeploymentValues(t *testing.T) {
	config := func(r *rendered) map[string]string {
		require.Len(t, r.configMaps, 1)
		return r.configMaps[0].Data
	}
	r := render(t, append([]string{"--set", "config.redisCluster=true", "--set", "config.redisAddr=redis-0:6379\\,redis-1:6379",
		"--set", "config.redisTLS=true", "--set", "config.redisTLSCAFile=/etc/redis-ca/ca.pem", "--set", "config.redisTLSServerName=redis.internal",
		"--set", "worker.keda.enabled=true", "--set", "worker.redisUsername=flashsale_worker"}, testSecrets...)...)
	c := config(r)
	require.Equal(t, "none", c["FLASHSALE_REDIS_DURABILITY"], "the default: a single Redis may have no replica")
	require.Equal(t, "true", c["FLASHSALE_REDIS_CLUSTER"])
	require.Equal(t, "redis-0:6379,redis-1:6379", c["FLASHSALE_REDIS_ADDR"])
	require.Equal(t, "true", c["FLASHSALE_REDIS_TLS"])
	require.Equal(t, "/etc/redis-ca/ca.pem", c["FLASHSALE_REDIS_TLS_CA_FILE"])
	require.Equal(t, "redis.internal", c["FLASHSALE_REDIS_TLS_SERVER_NAME"])
	require.Equal(t, "200ms", c["FLASHSALE_SOLD_OUT_REFRESH"])
	require.Len(t, r.scaledObjects, 1)
	require.Empty(t, r.triggerAuths, "no CA Secret: no TriggerAuthentication")
	for _, tr := range r.scaledObjects[0].Spec.Triggers {
		require.Equal(t, "redis-cluster-streams", tr.Type)
		require.NotContains(t, tr.Metadata, "consumerGroup", "XLEN mode on a cluster too")
		require.Equal(t, "redis-0:6379,redis-1:6379", tr.Metadata["addresses"])
		require.Equal(t, "true", tr.Metadata["enableTLS"])
		require.Equal(t, "FLASHSALE_REDIS_USERNAME", tr.Metadata["usernameFromEnv"])
		require.NotContains(t, tr.Metadata, "databaseIndex", "a cluster has one database")
	}

	var prod map[string]string
	for _, cm := range render(t, "-f", filepath.Join(chartDir, "ci", "production-values.yaml")).configMaps {
		if strings.HasSuffix(cm.Name, "-config") {
			prod = cm.Data
		}
	}
	require.Equal(t, "replica", prod["FLASHSALE_REDIS_DURABILITY"], "production waits for a replica")
	require.Equal(t, "1", prod["FLASHSALE_REDIS_MIN_REPLICAS"])
	require.Equal(t, "100ms", prod["FLASHSALE_REDIS_WAIT_TIMEOUT"])

	r = render(t, append([]string{"--set", "config.redisSentinelMaster=mymaster", "--set", "config.redisAddr=sentinel:26379",
		"--set", "worker.keda.enabled=true"}, testSecrets...)...)
	require.Equal(t, "mymaster", config(r)["FLASHSALE_REDIS_SENTINEL_MASTER"])
	for _, tr := range r.scaledObjects[0].Spec.Triggers {
		require.Equal(t, "redis-sentinel-streams", tr.Type)
		require.NotContains(t, tr.Metadata, "consumerGroup", "XLEN mode through sentinels too")
		require.Equal(t, "mymaster", tr.Metadata["sentinelMaster"])
	}
	for name, d := range r.deployments {
		var found bool
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "FLASHSALE_REDIS_SENTINEL_PASSWORD" {
				found = true
				require.Equal(t, "redis-sentinel-password", e.ValueFrom.SecretKeyRef.Key, name)
				require.True(t, *e.ValueFrom.SecretKeyRef.Optional, name)
			}
		}
		require.True(t, found, "%s reads the sentinels' password", name)
	}
	// A private CA reaches KEDA from a Secret, by a TriggerAuthentication
	// every trigger names.
	r = render(t, append([]string{"--set", "config.redisTLS=true", "--set", "worker.keda.enabled=true",
		"--set", "worker.keda.caSecret.name=redis-ca"}, testSecrets...)...)
	require.Len(t, r.triggerAuths, 1)
	ta := r.triggerAuths[0]
	require.Equal(t, "rel-flashsale-worker-redis", ta.Metadata.Name)
	require.Len(t, ta.Spec.SecretTargetRef, 1)
	require.Equal(t, "ca", ta.Spec.SecretTargetRef[0].Parameter, "the authParam KEDA's Redis scalers read the CA from")
	require.Equal(t, "redis-ca", ta.Spec.SecretTargetRef[0].Name)
	require.Equal(t, "ca.crt", ta.Spec.SecretTargetRef[0].Key)
	for _, tr := range r.scaledObjects[0].Spec.Triggers {
		require.NotNil(t, tr.AuthenticationRef)
		require.Equal(t, ta.Metadata.Name, tr.AuthenticationRef.Name)
		require.Equal(t, "true", tr.Metadata["enableTLS"])
	}
}

func TestChartRefusesWhatCannotWork(t *testing.T) {
	tests := []struct {
		name, want string
		args       []string
	}{
		{"HPA and KEDA on the workers", "cannot both be enabled", append([]string{"--set", "worker.autoscaling.enabled=true", "--set", "worker.keda.enabled=true"}, testSecrets...)},
		{"no secrets", "set existingSecret", nil},
		{"short JWT secret", "at least 32 bytes", []string{"--set", "secrets.mysqlDSN=x", "--set", "secrets.jwtSecret=short", "--set", "secrets.adminToken=admin-token-admin-token-admin-token"}},
		{"short admin token", "secrets.adminToken must be at least 32 bytes", []string{"--set", "secrets.mysqlDSN=x", "--set", "secrets.jwtSecret=" + strings.Repeat("s", 32), "--set", "secrets.adminToken=t"}},
		{"replicas not a number", "replicaCount", append([]string{"--set", "gateway.replicaCount=two"}, testSecrets...)},
		{"bad duration", "takeoverMinIdle", append([]string{"--set", "config.takeoverMinIdle=soon"}, testSecrets...)},
		{"unknown value (a typo)", "gatway", append([]string{"--set", "gatway.replicaCount=2"}, testSecrets...)},
		{"unknown log format", "logFormat", append([]string{"--set", "config.logFormat=xml"}, testSecrets...)},
		{"cluster and sentinels", "cannot both be set", append([]string{"--set", "config.redisCluster=true", "--set", "config.redisSentinelMaster=m"}, testSecrets...)},
		{"cluster with a database", "config.redisDB must be 0", append([]string{"--set", "config.redisCluster=true", "--set", "config.redisDB=2"}, testSecrets...)},
		{"durability without replicas", "every claim would answer 503", append([]string{"--set", "config.redisDurability=replica", "--set", "config.redisReplicas=0"}, testSecrets...)},
		{"unknown durability", "redisDurability", append([]string{"--set", "config.redisDurability=quorum"}, testSecrets...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"template", "rel", chartDir, "--kube-version", "1.30.0"}, tt.args...)...)
			require.Error(t, err)
			require.Contains(t, out, tt.want)
		})
	}
}

func TestLintStrict(t *testing.T) {
	for _, vs := range valueSets {
		out, err := helm(t, append([]string{"lint", "--strict", chartDir, "--kube-version", "1.30.0"}, vs.args...)...)
		require.NoError(t, err, "%s: %s", vs.name, out)
	}
}

// The admin API has its own port and ClusterIP Service by default; with
// adminPort 0 it is served on the public port and there is no such Service.
func TestAdminAPIHasItsOwnServiceByDefault(t *testing.T) {
	adminAddr := func(r *rendered) string {
		for _, c := range r.deployments["rel-flashsale-gateway"].Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if e.Name == "FLASHSALE_ADMIN_ADDR" {
					return e.Value
				}
			}
		}
		return ""
	}
	adminService := func(r *rendered) *corev1.Service {
		for _, s := range r.services {
			if s.Name == "rel-flashsale-gateway-admin" {
				return s
			}
		}
		return nil
	}
	r := render(t, testSecrets...)
	require.Equal(t, ":8081", adminAddr(r))
	s := adminService(r)
	require.NotNil(t, s)
	require.Equal(t, corev1.ServiceTypeClusterIP, s.Spec.Type)
	require.Equal(t, "admin", s.Spec.Ports[0].TargetPort.StrVal)
	for _, p := range r.pods {
		var urls []string
		for _, e := range p.Spec.Containers[0].Env {
			if strings.HasPrefix(e.Name, "FLASHSALE_SMOKE") {
				urls = append(urls, e.Value)
			}
		}
		require.Contains(t, urls, "http://rel-flashsale-gateway-admin:8081", "helm test reaches the admin API")
	}

	r = render(t, append([]string{"--set", "gateway.adminPort=0"}, testSecrets...)...)
	require.Empty(t, adminAddr(r))
	require.Nil(t, adminService(r))
}

// Each role may read its own secret keys and Redis ACL user; the migration
// Job reads migrate-dsn, optional (the app falls back to the role DSN).
func TestLeastPrivilegeValues(t *testing.T) {
	r := render(t, append([]string{"--set", "worker.redisUsername=flashsale_worker", "--set", "worker.mysqlDSNKey=worker-mysql-dsn",
		"--set", "worker.redisPasswordKey=worker-redis-password", "--set", "secrets.migrateDSN=ddl:pw@tcp(mysql:3306)/flashsale"}, testSecrets...)...)
	env := func(c corev1.Container) map[string]corev1.EnvVar {
		out := map[string]corev1.EnvVar{}
		for _, e := range c.Env {
			out[e.Name] = e
		}
		return out
	}
	w := env(r.deployments["rel-flashsale-worker"].Spec.Template.Spec.Containers[0])
	require.Equal(t, "flashsale_worker", w["FLASHSALE_REDIS_USERNAME"].Value)
	require.Equal(t, "worker-mysql-dsn", w["FLASHSALE_MYSQL_DSN"].ValueFrom.SecretKeyRef.Key)
	require.Equal(t, "worker-redis-password", w["FLASHSALE_REDIS_PASSWORD"].ValueFrom.SecretKeyRef.Key)
	g := env(r.deployments["rel-flashsale-gateway"].Spec.Template.Spec.Containers[0])
	require.Equal(t, "mysql-dsn", g["FLASHSALE_MYSQL_DSN"].ValueFrom.SecretKeyRef.Key, "the default key")
	require.NotContains(t, g, "FLASHSALE_REDIS_USERNAME")
	for name, d := range r.deployments {
		init := d.Spec.Template.Spec.InitContainers
		require.Len(t, init, 1, name)
		require.Equal(t, []string{"/usr/local/bin/worker", "migrate"}, init[0].Command, name)
		m := env(init[0])
		require.Equal(t, "migrate-dsn", m["FLASHSALE_MIGRATE_DSN"].ValueFrom.SecretKeyRef.Key, name)
		require.True(t, *m["FLASHSALE_MIGRATE_DSN"].ValueFrom.SecretKeyRef.Optional, name)
	}
	require.Contains(t, r.secrets[0].Data, "migrate-dsn")
}

// With networkPolicy.enabled, each role's pods take ingress only on their
// ports: the gateway's public port from anywhere, its admin port from
// adminFrom alone, ops from the monitoring namespace alone.
func TestNetworkPolicies(t *testing.T) {
	r := render(t, append([]string{"--set", "networkPolicy.enabled=true",
		"--set-json", `networkPolicy.adminFrom=[{"namespaceSelector":{"matchLabels":{"team":"ops"}}}]`}, testSecrets...)...)
	require.Len(t, r.networkPolicies, 3)
	for _, np := range r.networkPolicies {
		requireSelectsADeployment(t, "networkpolicy "+np.Name, np.Spec.PodSelector.MatchLabels, r)
		open, fromOps := 0, 0
		for _, in := range np.Spec.Ingress {
			port := in.Ports[0].Port.StrVal
			switch {
			case port == "http" && len(in.From) == 0:
				open++
			case port == "admin":
				require.Equal(t, map[string]string{"team": "ops"}, in.From[0].NamespaceSelector.MatchLabels)
			case port == "ops":
				fromOps++
				require.Equal(t, "monitoring", in.From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"])
			default:
				t.Fatalf("%s: unexpected rule %+v", np.Name, in)
			}
		}
		require.Equal(t, 1, fromOps, np.Name)
		if np.Name == "rel-flashsale-gateway" {
			require.Equal(t, 1, open, "the public port is open")
			require.Len(t, np.Spec.Ingress, 3)
		} else {
			require.Zero(t, open, np.Name)
		}
	}
	_, err := helm(t, append([]string{"template", "rel", chartDir, "--kube-version", "1.30.0", "--set", "networkPolicy.enabled=true"}, testSecrets...)...)
	require.ErrorContains(t, err, "networkPolicy.adminFrom", "no one named for the admin API: refused, not left open")
}

// No release object is a Helm hook (rollback restores the ConfigMap,
// uninstall removes the Secret): every pod migrates first instead. The
// PDBs never block a drain; pods spread over zones; a digest pins the
// image; extra volumes reach every container.
func TestReleaseObjectsAndPodPlacement(t *testing.T) {
	r := render(t, append([]string{"--set", "image.digest=sha256:" + strings.Repeat("ab", 32), "--set", "priorityClassName=sale",
		"--set-json", `extraVolumes=[{"name":"ca","configMap":{"name":"corp-ca"}}]`,
		"--set-json", `extraVolumeMounts=[{"name":"ca","mountPath":"/etc/ssl/corp","readOnly":true}]`,
		"--set-json", `serviceAccount.annotations={"iam.example/role":"flashsale"}`}, testSecrets...)...)
	require.Empty(t, r.jobs, "no migration hook Job")
	for _, c := range r.configMaps {
		require.NotContains(t, c.Annotations, "helm.sh/hook", c.Name)
	}
	for _, s := range r.secrets {
		require.NotContains(t, s.Annotations, "helm.sh/hook", s.Name)
	}
	for name, d := range r.deployments {
		spec := d.Spec.Template.Spec
		require.Equal(t, "sale", spec.PriorityClassName, name)
		require.Len(t, spec.TopologySpreadConstraints, 1, name)
		require.Equal(t, "topology.kubernetes.io/zone", spec.TopologySpreadConstraints[0].TopologyKey)
		require.True(t, labels.SelectorFromSet(spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)), name)
		require.Equal(t, "ghcr.io/flashsale/flashsale@sha256:"+strings.Repeat("ab", 32), spec.Containers[0].Image, name)
		require.Equal(t, "ca", spec.Volumes[0].Name, name)
		require.Equal(t, "/etc/ssl/corp", spec.Containers[0].VolumeMounts[0].MountPath, name)
	}
	for _, p := range r.pdbs {
		require.Nil(t, p.Spec.MinAvailable, p.Name)
		require.Equal(t, 1, p.Spec.MaxUnavailable.IntValue(), p.Name)
	}
}

// The alerts parse with Prometheus's own rule parser (PromQL included),
// each has a severity, a summary, a description and a runbook section that
// exists; the dashboard is JSON whose every query parses as PromQL.
func TestDashboardAndAlerts(t *testing.T) {
	r := render(t, append([]string{"--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.dashboards.enabled=true"}, testSecrets...)...)
	require.Len(t, r.prometheusRules, 1)
	groups, err := yaml.Marshal(map[string]any{"groups": r.prometheusRules[0].Spec.Groups})
	require.NoError(t, err)
	promql := parser.NewParser(parser.Options{})
	parsed, errs := rulefmt.Parse(groups, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	require.Empty(t, errs)
	runbook, err := os.ReadFile("../../../docs/RUNBOOK.md")
	require.NoError(t, err)
	alerts := 0
	for _, g := range parsed.Groups {
		for _, rule := range g.Rules {
			alerts++
			require.Contains(t, []string{"warning", "critical"}, rule.Labels["severity"], rule.Alert)
			require.NotEmpty(t, rule.Annotations["summary"], rule.Alert)
			require.NotEmpty(t, rule.Annotations["description"], rule.Alert)
			anchor := strings.ToLower(rule.Alert)
			require.True(t, strings.HasSuffix(rule.Annotations["runbook_url"], "RUNBOOK.md#"+anchor), rule.Alert)
			require.Contains(t, string(runbook), "\n## "+rule.Alert+"\n", "docs/RUNBOOK.md needs a section per alert")
			require.Positive(t, rule.For, "%s: a for: duration, so one scrape's blip does not page", rule.Alert)
		}
	}
	require.Equal(t, 11, alerts)

	var dash *corev1.ConfigMap
	for _, c := range r.configMaps {
		if c.Labels["grafana_dashboard"] == "1" {
			dash = c
		}
	}
	require.NotNil(t, dash, "the dashboard ConfigMap, labelled for Grafana's sidecar")
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal([]byte(dash.Data["flashsale.json"]), &d))
	require.Equal(t, "flashsale", d.UID)
	require.NotEmpty(t, d.Panels)
	vars := strings.NewReplacer("$__rate_interval", "5m", "$namespace", ".*")
	for _, p := range d.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, target := range p.Targets {
			_, err := promql.ParseExpr(vars.Replace(target.Expr))
			require.NoError(t, err, "%s: %s", p.Title, target.Expr)
			require.Contains(t, target.Expr, "by (namespace", "%s: the namespace variable is multi-select, so every query splits by it", p.Title)
		}
	}
}

// The chart works as a dependency of an umbrella chart (an Argo or Flux
// app of apps): Helm passes it the umbrella's global block, which the
// schema must accept, and nameOverride, fullnameOverride, commonLabels and
// commonAnnotations reach every object.
func TestChartRendersAsASubchart(t *testing.T) {
	dir := t.TempDir()
	umbrella := filepath.Join(dir, "shop")
	require.NoError(t, os.MkdirAll(filepath.Join(umbrella, "charts"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(umbrella, "Chart.yaml"), []byte(
		"apiVersion: v2\nname: shop\nversion: 1.0.0\ndependencies:\n  - name: flashsale\n    version: \">=0.0.0\"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(umbrella, "values.yaml"), []byte(`global:
  imageRegistry: registry.example.com
  storageClass: fast
flashsale:
  fullnameOverride: sale
  commonLabels:
    team: checkout
  commonAnnotations:
    owner: checkout@example.com
  existingSecret: sale-secrets
  worker:
    keda:
      enabled: true
`), 0o644))
	out, err := exec.Command("cp", "-r", chartDir, filepath.Join(umbrella, "charts", "flashsale")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	_ = os.RemoveAll(filepath.Join(umbrella, "charts", "flashsale", "test")) // the chart's own tests, not the chart

	text, err := helm(t, "template", "rel", umbrella, "--kube-version", "1.30.0", "--namespace", "shop")
	require.NoError(t, err, "the umbrella renders: %s", text)
	var objects int
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(text, -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var obj struct {
			Kind     string
			Metadata struct {
				Name        string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
		objects++
		require.True(t, strings.HasPrefix(obj.Metadata.Name, "sale"), "%s %s: fullnameOverride names it", obj.Kind, obj.Metadata.Name)
		require.Equal(t, "checkout", obj.Metadata.Labels["team"], "%s %s: commonLabels", obj.Kind, obj.Metadata.Name)
		require.Equal(t, "checkout@example.com", obj.Metadata.Annotations["owner"], "%s %s: commonAnnotations", obj.Kind, obj.Metadata.Name)
	}
	require.Greater(t, objects, 8)

	r := render(t, append([]string{"--set", "nameOverride=promo"}, testSecrets...)...)
	require.Contains(t, r.deployments, "rel-promo-gateway", "nameOverride names the objects")
}

// The events' sinks are values: the reaper alone gets them, the webhook
// secret and the SASL password from the Secret, and nothing when unset.
func TestEventSinksReachTheReaper(t *testing.T) {
	envOf := func(r *rendered, role string) map[string]corev1.EnvVar {
		out := map[string]corev1.EnvVar{}
		for _, e := range r.deployments["rel-flashsale-"+role].Spec.Template.Spec.Containers[0].Env {
			out[e.Name] = e
		}
		return out
	}
	none := render(t, testSecrets...)
	require.NotContains(t, envOf(none, "reaper"), "FLASHSALE_EVENTS_WEBHOOK_URLS")
	require.NotContains(t, envOf(none, "reaper"), "FLASHSALE_EVENTS_KAFKA_BROKERS")

	r := render(t, append(testSecrets, "--set", "events.webhook.urls[0]=https://orders.example/hooks", "--set", "events.webhook.urls[1]=https://notify.example/in",
		"--set", "secrets.eventsWebhookSecret=whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0",
		"--set", "events.kafka.brokers[0]=kafka-0:9092", "--set", "events.kafka.saslMechanism=SCRAM-SHA-512",
		"--set", "events.kafka.saslUser=flashsale", "--set", "secrets.eventsKafkaSASLPassword=pw", "--set", "events.source=shop-eu",
		"--set", "events.relay.parts=4", "--set", "events.relay.lease=20s")...)
	env := envOf(r, "reaper")
	require.Equal(t, "4", env["FLASHSALE_EVENTS_RELAY_PARTS"].Value, "the sinks relayed in parts, shared among the reaper replicas")
	require.Equal(t, "20s", env["FLASHSALE_EVENTS_RELAY_LEASE"].Value)
	require.Equal(t, "1", envOf(none, "reaper")["FLASHSALE_EVENTS_RELAY_PARTS"].Value)
	require.Equal(t, "https://orders.example/hooks,https://notify.example/in", env["FLASHSALE_EVENTS_WEBHOOK_URLS"].Value)
	require.Equal(t, "events-webhook-secret", env["FLASHSALE_EVENTS_WEBHOOK_SECRET"].ValueFrom.SecretKeyRef.Key)
	require.Equal(t, "kafka-0:9092", env["FLASHSALE_EVENTS_KAFKA_BROKERS"].Value)
	require.Equal(t, "flashsale.events", env["FLASHSALE_EVENTS_KAFKA_TOPIC"].Value)
	require.Equal(t, "SCRAM-SHA-512", env["FLASHSALE_EVENTS_KAFKA_SASL_MECHANISM"].Value)
	require.Equal(t, "events-kafka-sasl-password", env["FLASHSALE_EVENTS_KAFKA_SASL_PASSWORD"].ValueFrom.SecretKeyRef.Key)
	require.Equal(t, "shop-eu", env["FLASHSALE_EVENTS_SOURCE"].Value)
	require.Equal(t, "shop-eu", envOf(r, "gateway")["FLASHSALE_EVENTS_SOURCE"].Value, "the events API's source is the sinks'")
	require.Contains(t, r.secrets[0].Data, "events-webhook-secret")
	require.Contains(t, r.secrets[0].Data, "events-kafka-sasl-password")
	for _, role := range []string{"gateway", "worker"} {
		require.NotContains(t, envOf(r, role), "FLASHSALE_EVENTS_WEBHOOK_URLS", role)
	}
	_, err := helm(t, append([]string{"template", "rel", chartDir, "--set", "events.webhook.urls[0]=ftp://x"}, testSecrets...)...)
	require.Error(t, err, "a webhook URL that is not http(s) is refused by the schema")
}
