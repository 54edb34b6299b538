"""cn_clip tokenization: TEXT (UTF-8) -> INPUT_IDS [52] INT64, identical to cn_clip.clip.tokenize."""

import json

import triton_python_backend_utils as pb_utils

from triton_helpers.cn_clip import CnClipTokenizer
from triton_helpers.config import parameter
from triton_helpers.errors import output_dtypes, respond_each, utf8_texts


class TritonPythonModel:
    """Runs cn_clip's own vocabulary and WordPiece tokenizer (loaded without torch)."""

    def initialize(self, args):
        """Load the tokenizer; read context_length, max_text_bytes and reject_empty."""
        config = json.loads(args["model_config"])
        self.dtypes = output_dtypes(pb_utils, config)
        self.tokenizer = CnClipTokenizer(parameter(config, "context_length", 52, int))
        self.max_bytes = parameter(config, "max_text_bytes", 16384, int)
        self.reject_empty = parameter(config, "reject_empty", "true").lower() in ("1", "true", "yes")

    def execute(self, requests):
        """One response per request; a bad text fails only its own request."""
        return respond_each(pb_utils, requests, self._handle)

    def _handle(self, request):
        # Sizes are checked on the raw bytes, before a 1 MB text is decoded or tokenized.
        texts = utf8_texts(pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy(), "TEXT", self.max_bytes)
        ids = self.tokenizer.encode_checked(texts, "TEXT", max_bytes=self.max_bytes, reject_empty=self.reject_empty)
        out = pb_utils.Tensor("INPUT_IDS", ids.astype(self.dtypes["INPUT_IDS"], copy=False))
        return pb_utils.InferenceResponse(output_tensors=[out])

    def finalize(self):
        """Nothing to release."""
