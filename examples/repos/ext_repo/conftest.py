# the tests import extpkg from the checkout (no install needed)
