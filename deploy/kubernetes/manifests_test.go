// Package kubernetes holds vgpu's Kubernetes manifests (kubectl apply -k
// deploy/kubernetes/); its test decodes every YAML document here into the
// Kubernetes API types, strictly, and checks that the pieces agree with each
// other and with the code (resource name, sockets, kubelet folder).
package kubernetes

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/vgpu-project/vgpu/backend/deviceplugin"
	"github.com/vgpu-project/vgpu/backend/serveconf"
)

// kustomization is the part of kustomize's Kustomization this folder uses
// (kustomize.config.k8s.io/v1beta1; not a Kubernetes API type).
type kustomization struct {
	metav1.TypeMeta    `json:",inline"`
	Namespace          string   `json:"namespace"`
	Resources          []string `json:"resources"`
	ConfigMapGenerator []struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
	} `json:"configMapGenerator"`
	GeneratorOptions struct {
		DisableNameSuffixHash bool `json:"disableNameSuffixHash"`
	} `json:"generatorOptions"`
}

// vmi is the part of KubeVirt's VirtualMachineInstance (kubevirt.io/v1) the
// example sets; unknown fields are refused like the Kubernetes types'.
type vmi struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Domain struct {
			CPU       map[string]any `json:"cpu"`
			Resources struct {
				Requests corev1.ResourceList `json:"requests"`
				Limits   corev1.ResourceList `json:"limits"`
			} `json:"resources"`
			Devices map[string]any `json:"devices"`
		} `json:"domain"`
		Volumes []map[string]any `json:"volumes"`
	} `json:"spec"`
}

// hookSidecar is one entry of KubeVirt's hooks.kubevirt.io/hookSidecars.
type hookSidecar struct {
	Image           string   `json:"image"`
	ImagePullPolicy string   `json:"imagePullPolicy"`
	Command         []string `json:"command"`
	Args            []string `json:"args"`
}

// object is a decoded document and where it came from.
type object struct {
	file string
	obj  any
}

func newObject(t *testing.T, where string, tm metav1.TypeMeta) any {
	switch tm.APIVersion + "/" + tm.Kind {
	case "v1/Namespace":
		return &corev1.Namespace{}
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}
	case "apps/v1/DaemonSet":
		return &appsv1.DaemonSet{}
	case "kustomize.config.k8s.io/v1beta1/Kustomization":
		return &kustomization{}
	case "kubevirt.io/v1/VirtualMachineInstance":
		return &vmi{}
	}
	t.Fatalf("%s: no type for apiVersion %q kind %q: add it to the test", where, tm.APIVersion, tm.Kind)
	return nil
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// decodeAll decodes every YAML document under the folder, strictly.
func decodeAll(t *testing.T) []object {
	var out []object
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, doc := range docSep.Split(string(b), -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			where := path + " document " + string(rune('1'+i))
			j, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			var tm metav1.TypeMeta
			if err := json.Unmarshal(j, &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			obj := newObject(t, where, tm)
			dec := json.NewDecoder(bytes.NewReader(j))
			dec.DisallowUnknownFields()
			if err := dec.Decode(obj); err != nil {
				t.Fatalf("%s: not a valid %s: %v", where, tm.Kind, err)
			}
			out = append(out, object{file: path, obj: obj})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func find[T any](objs []object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.obj.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func TestManifests(t *testing.T) {
	objs := decodeAll(t)
	ks := find[*kustomization](objs)
	dss := find[*appsv1.DaemonSet](objs)
	nss := find[*corev1.Namespace](objs)
	vmis := find[*vmi](objs)
	if len(ks) != 1 || len(dss) != 1 || len(nss) != 1 || len(vmis) != 1 {
		t.Fatalf("want one kustomization, DaemonSet, Namespace and example VMI; got %d, %d, %d, %d", len(ks), len(dss), len(nss), len(vmis))
	}
	k, ds, vm := ks[0], dss[0], vmis[0]

	// kustomize: every manifest here is a resource, the namespace agrees,
	// and the generated ConfigMap is the one the DaemonSet mounts.
	for _, o := range objs {
		if dir := filepath.Dir(o.file); dir == "." && o.file != "kustomization.yaml" && !slices.Contains(k.Resources, o.file) {
			t.Errorf("%s is not in kustomization.yaml's resources", o.file)
		}
	}
	if k.Namespace != nss[0].Name || ds.Namespace != k.Namespace {
		t.Errorf("namespaces: kustomization %q, Namespace %q, DaemonSet %q", k.Namespace, nss[0].Name, ds.Namespace)
	}
	if len(k.ConfigMapGenerator) != 1 || !k.GeneratorOptions.DisableNameSuffixHash {
		t.Fatalf("want one ConfigMap generator without a name hash: %+v", k)
	}
	gen := k.ConfigMapGenerator[0]
	if !slices.Equal(gen.Files, []string{"vgpu.conf"}) {
		t.Fatalf("the ConfigMap's files: %v", gen.Files)
	}
	conf, err := serveconf.Load("vgpu.conf")
	if err != nil {
		t.Fatal(err)
	}

	// The DaemonSet: selector matches the pod, the config volume is the
	// generated ConfigMap, and the two containers share the host's
	// /run/vgpu where the backend's sockets and the plugin's folder are.
	spec := ds.Spec.Template.Spec
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("the selector's %s=%s is not on the pod template", k, v)
		}
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	if cm := volumes["config"].ConfigMap; cm == nil || cm.Name != gen.Name {
		t.Errorf("the config volume is not the ConfigMap %s: %+v", gen.Name, volumes["config"])
	}
	if hp := volumes["run"].HostPath; hp == nil || hp.Path != serveconf.RunDir {
		t.Errorf("the run volume is not the host's %s: %+v", serveconf.RunDir, volumes["run"])
	}
	if hp := volumes["device-plugins"].HostPath; hp == nil || filepath.Clean(hp.Path) != filepath.Clean(pluginapi.DevicePluginPath) {
		t.Errorf("the device-plugins volume is not the kubelet's %s", pluginapi.DevicePluginPath)
	}
	containers := map[string]corev1.Container{}
	for _, c := range spec.Containers {
		containers[c.Name] = c
		if len(c.Command) < 2 || c.Command[0] != "/usr/bin/vgpu" {
			t.Errorf("container %s does not run /usr/bin/vgpu: %v", c.Name, c.Command)
		}
		mounts := map[string]string{}
		for _, m := range c.VolumeMounts {
			if _, ok := volumes[m.Name]; !ok {
				t.Errorf("container %s mounts the unknown volume %s", c.Name, m.Name)
			}
			mounts[m.Name] = m.MountPath
		}
		if mounts["config"] != filepath.Dir(serveconf.DefaultPath) {
			t.Errorf("container %s has the configuration at %q, want %s", c.Name, mounts["config"], filepath.Dir(serveconf.DefaultPath))
		}
		if !slices.Equal(c.Command[2:4], []string{"--config", serveconf.DefaultPath}) {
			t.Errorf("container %s: %v, want --config %s", c.Name, c.Command, serveconf.DefaultPath)
		}
		// Host paths must look the same inside: the kubelet mounts the
		// plugin's folders into VM pods by their host path.
		if mounts["run"] != serveconf.RunDir {
			t.Errorf("container %s mounts the host's %s at %q", c.Name, serveconf.RunDir, mounts["run"])
		}
		for _, key := range []string{serveconf.KeyFrontSocket, serveconf.KeyStatusSocket} {
			if p, _ := conf.Get(key); !strings.HasPrefix(p, serveconf.RunDir+"/") {
				t.Errorf("vgpu.conf's %s %q is not under %s", key, p, serveconf.RunDir)
			}
		}
	}
	serve, plugin := containers["serve"], containers["device-plugin"]
	if serve.Command[1] != "serve" || plugin.Command[1] != "device-plugin" {
		t.Fatalf("containers: serve runs %v, device-plugin runs %v", serve.Command, plugin.Command)
	}
	if i := slices.Index(plugin.Command, "--host-dir"); i < 0 || !strings.HasPrefix(plugin.Command[i+1], serveconf.RunDir+"/") {
		t.Errorf("the device plugin's --host-dir is not under the shared %s: %v", serveconf.RunDir, plugin.Command)
	}
	if m, _ := conf.Get(serveconf.KeyMemLimit); m == "" || m == "0" {
		t.Error("vgpu.conf sets no mem-limit: the device plugin needs one")
	}

	// The example VMI asks for the device plugin's resource and names the
	// hook the way KubeVirt's sidecar-shim wants.
	q, ok := vm.Spec.Domain.Resources.Limits[corev1.ResourceName(deviceplugin.ResourceName)]
	if !ok || !q.Equal(resource.MustParse("1")) {
		t.Errorf("the example VMI does not ask for one %s: %v", deviceplugin.ResourceName, vm.Spec.Domain.Resources.Limits)
	}
	var hooks []hookSidecar
	dec := json.NewDecoder(strings.NewReader(vm.Annotations["hooks.kubevirt.io/hookSidecars"]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&hooks); err != nil || len(hooks) != 1 {
		t.Fatalf("the hook annotation: %v, %+v", err, hooks)
	}
	if len(hooks[0].Args) != 2 || hooks[0].Args[0] != "--version" || !slices.Contains([]string{"v1alpha1", "v1alpha2", "v1alpha3"}, hooks[0].Args[1]) || hooks[0].Image == "" {
		t.Errorf("the hook sidecar %+v: want an image and --version v1alpha1..3 (the sidecar-shim's)", hooks[0])
	}
}
