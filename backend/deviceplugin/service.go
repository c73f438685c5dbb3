package deviceplugin

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// service is the DevicePlugin gRPC service the kubelet calls.
type service struct {
	pluginapi.UnimplementedDevicePluginServer
	p *Plugin
}

func (s *service) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the device list now and after every change.
func (s *service) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		devs, changed := s.p.snapshot()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		case <-s.p.done:
			return nil
		}
	}
}

// Allocate hands each container its vGPU: one per container, a VM sees
// every GPU the backend serves through it.
func (s *service) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.GetContainerRequests() {
		ids := cr.GetDevicesIds()
		if len(ids) != 1 {
			return nil, fmt.Errorf("deviceplugin: a container asked for %d of %s: a VM takes one", len(ids), ResourceName)
		}
		r, err := s.p.allocate(ids[0])
		if err != nil {
			return nil, err
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	return resp, nil
}

func (s *service) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func (s *service) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}
