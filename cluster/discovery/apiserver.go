package discovery

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// PodSource lists and watches the pods of a namespace: the API server
// (NewAPIServerSource), or client-go's fake clientset in tests.
type PodSource interface {
	ListPods(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error)
	WatchPods(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
}

// apiServer reads pods from the API server with a REST client that knows
// only the core group. client-go's typed clientset would do the same but
// links the codecs of every API group (some 25 MB of binary); pods need
// one.
type apiServer struct {
	client *rest.RESTClient
	params runtime.ParameterCodec
}

// NewAPIServerSource returns the pods of the API server cfg reaches (from
// rest.InClusterConfig in a pod).
func NewAPIServerSource(cfg *rest.Config) (PodSource, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(cfg)
	c.APIPath, c.GroupVersion = "/api", &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = "kvrouter"
	}
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("the Kubernetes API client: %w", err)
	}
	return &apiServer{client: client, params: runtime.NewParameterCodec(scheme)}, nil
}

func (a *apiServer) ListPods(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	err := a.client.Get().Namespace(namespace).Resource("pods").VersionedParams(&opts, a.params).Do(ctx).Into(out)
	return out, err
}

func (a *apiServer) WatchPods(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return a.client.Get().Namespace(namespace).Resource("pods").VersionedParams(&opts, a.params).Watch(ctx)
}

// IsWatchListSemanticsUnSupported makes the informers list, then watch,
// which every API server version does, rather than stream the initial list
// in the watch.
func (a *apiServer) IsWatchListSemanticsUnSupported() bool { return true }
