"""ONNX operators the TensorRT 8.6 ONNX parser (onnx-tensorrt) converts, for the export check.

Source: onnx/onnx-tensorrt ``docs/operators.md`` ("Operator Support Matrix"), release/8.5-GA
("TensorRT 8.5 supports operators up to Opset 17"), every operator marked ``Y``; plus the one
operator TensorRT 8.6 added that we use: ``LayerNormalization`` (opset 17), parsed into the
INormalizationLayer introduced in TensorRT 8.6 (onnx-tensorrt release/8.6-GA). The 8.6 parser
dropped nothing from 8.5's list, so this set is a conservative subset of what 8.6 accepts.

Restrictions from the same table that our graphs must meet (checked by ``graph_checks``):
TopK's K, Slice/Squeeze/Unsqueeze axes and CumSum's axis are initializers/constants, which a
simplified static-shape graph satisfies; InstanceNormalization scale and bias are initializers.
"""

from __future__ import annotations

TENSORRT_8_6_OPS = frozenset("""
Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization Cast Ceil Celu
Clip Concat Constant ConstantOfShape Conv ConvTranspose Cos Cosh CumSum DepthToSpace DequantizeLinear Div
Dropout Einsum Elu Equal Erf Exp Expand EyeLike Flatten Floor Gather GatherElements GatherND Gemm
GlobalAveragePool GlobalLpPool GlobalMaxPool Greater GreaterOrEqual GridSample GRU HardSwish HardSigmoid
Identity If ImageScaler InstanceNormalization IsNaN LeakyRelu Less LessOrEqual Log LogSoftmax Loop LRN LSTM
LpNormalization LpPool MatMul Max MaxPool Mean MeanVarianceNormalization Min Mod Mul Neg NonMaxSuppression
NonZero Not OneHot Or Pad ParametricSoftplus Pow PRelu QuantizeLinear RandomNormal RandomNormalLike
RandomUniform RandomUniformLike Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax
ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize ReverseSequence RNN RoiAlign
Round ScaledTanh Scan Scatter ScatterElements ScatterND Selu Shape Shrink Sigmoid Sign Sin Sinh Size Slice
Softmax Softplus Softsign SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh ThresholdedRelu Tile TopK
Transpose Trilu Unsqueeze Upsample Where Xor
LayerNormalization
""".split())
