// Correct Linear + exact GELU in the torch-extension format (CPU backend):
// forward(x, weight, bias) = gelu(x @ weight^T + bias), double
// accumulation in a hand loop; torch only allocates the output.
#include <torch/extension.h>
#include <math.h>

torch::Tensor forward(torch::Tensor input, torch::Tensor weight,
		      torch::Tensor bias)
{
	torch::Tensor x = input.contiguous();
	torch::Tensor w = weight.contiguous();
	torch::Tensor b = bias.contiguous();
	int64_t K = x.size(-1);
	int64_t N = w.size(0);
	int64_t M = K ? x.numel() / K : 0;
	torch::Tensor out = torch::empty({M, N}, x.options());
	const float *xp = x.data_ptr<float>();
	const float *wp = w.data_ptr<float>();
	const float *bp = b.data_ptr<float>();
	float *yp = out.data_ptr<float>();
	for (int64_t i = 0; i < M; i++)
		for (int64_t j = 0; j < N; j++) {
			double acc = 0.0;
			for (int64_t k = 0; k < K; k++)
				acc += (double)xp[i * K + k] * wp[j * K + k];
			float v = (float)acc + bp[j];
			yp[i * N + j] = 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2));
		}
	return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
	m.def("forward", &forward, "gelu(x @ W^T + b) (hand loop)");
}
