from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name="extpkg",
    version="0.1.0",
    packages=["extpkg"],
    ext_modules=[
        CppExtension("extpkg._clip", ["csrc/clip.cpp"]),
    ],
    cmdclass={"build_ext": BuildExtension},
)
