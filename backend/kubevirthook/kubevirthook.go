// Package kubevirthook is vgpu's KubeVirt hook: the onDefineDomain program
// that KubeVirt's sidecar-shim runs in a VM's virt-launcher pod before it
// defines the domain. For a VMI that asks for a vGPU (the device plugin's
// resource in spec.domain.resources) it adds what the domain needs -- guest
// RAM in a shared memfd and the vhost-user-vsock device on the socket the
// device plugin mounted into the compute container -- with package
// domainxml; any other VMI's domain comes back unchanged.
//
// The contract (KubeVirt v1.1 and later, cmd/sidecars/sidecar_shim.go): the
// shim looks up "onDefineDomain" in $PATH and runs it with
// --vmi VMI_JSON --domain DOMAIN_XML; the program prints the new domain XML
// on stdout; a non-zero exit fails the VMI's start. The vgpu binary is that
// program when it is invoked under that name (see cmd/vgpu).
//
// Trust: the VMI and the domain come from KubeVirt, which took the VMI from
// its owner; both are parsed, never executed, and a malformed one is an
// error, not a panic.
package kubevirthook

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/vgpu-project/vgpu/backend/deviceplugin"
	"github.com/vgpu-project/vgpu/backend/domainxml"
)

// vmi is the part of a KubeVirt VirtualMachineInstance the hook reads.
type vmi struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Domain struct {
			Resources struct {
				Requests map[string]json.RawMessage `json:"requests"`
				Limits   map[string]json.RawMessage `json:"limits"`
			} `json:"resources"`
		} `json:"domain"`
	} `json:"spec"`
}

// vgpus returns how many vGPUs the VMI asks for (limits, else requests).
func (v *vmi) vgpus() (int, error) {
	for _, m := range []map[string]json.RawMessage{v.Spec.Domain.Resources.Limits, v.Spec.Domain.Resources.Requests} {
		raw, ok := m[deviceplugin.ResourceName]
		if !ok {
			continue
		}
		// A quantity is a JSON string ("1") or number (1).
		var s string
		if json.Unmarshal(raw, &s) != nil {
			s = string(raw)
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("kubevirthook: %s: %s is not a whole number of vGPUs", deviceplugin.ResourceName, raw)
		}
		return n, nil
	}
	return 0, nil
}

// OnDefineDomain returns the domain XML for the VMI: with the vGPU when
// the VMI asks for one, else domain itself.
func OnDefineDomain(vmiJSON, domain []byte) ([]byte, error) {
	var v vmi
	if err := json.Unmarshal(vmiJSON, &v); err != nil {
		return nil, fmt.Errorf("kubevirthook: decoding the VMI: %w", err)
	}
	n, err := v.vgpus()
	if err != nil {
		return nil, err
	}
	switch {
	case n == 0:
		return domain, nil
	case n > 1:
		return nil, fmt.Errorf("kubevirthook: VMI %s/%s asks for %d vGPUs: a VM takes one (it sees every GPU the backend serves through it)", v.Metadata.Namespace, v.Metadata.Name, n)
	}
	out, err := domainxml.AddVGPU(domain, domainxml.Options{Socket: deviceplugin.ContainerSocket})
	if err != nil {
		return nil, fmt.Errorf("kubevirthook: VMI %s/%s: %w", v.Metadata.Namespace, v.Metadata.Name, err)
	}
	return out, nil
}

// Main runs the hook with the shim's arguments (without the program name),
// writing the domain to stdout and errors to stderr; it returns the exit
// status.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("onDefineDomain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	vmiJSON := fs.String("vmi", "", "the VMI, as JSON")
	domain := fs.String("domain", "", "the domain XML KubeVirt made")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *vmiJSON == "" || *domain == "" {
		fmt.Fprintln(stderr, "onDefineDomain (vgpu): want --vmi JSON --domain XML, as KubeVirt's sidecar-shim passes them")
		return 2
	}
	out, err := OnDefineDomain([]byte(*vmiJSON), []byte(*domain))
	if err == nil && len(out) == 0 {
		err = errors.New("kubevirthook: empty domain")
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintln(stderr, "onDefineDomain (vgpu):", err)
		return 1
	}
	return 0
}
